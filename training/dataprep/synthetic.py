"""Small deterministic corpora, vocabularies and shard sets, for the tests and the benchmarks.

Shards the way a user makes them, in a few seconds on one core: a synthetic corpus, a vocab
trained on it, then ``python -m training.dataprep.prepare_data`` in a fresh process::

    from .synthetic import make_shards

    shards = make_shards(tmp_path, n_docs=60, flags={"num_shards": 6, "dupe_factor": 2, "num_workers": 1})
    shards.dir, shards.vocab_size, shards.files

``prepare_data_command`` is that command line, for callers that run the tool themselves
(timed, with other flags, or failing on purpose).

The text is English-looking but synthetic: words drawn with a Zipf-like frequency from a fixed
list of common words plus made-up multi-syllable words, so that a small vocabulary splits many
words into ``##`` pieces (which whole-word masking needs). Same arguments, same bytes.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path

from trainium_job.launch import script_args_from_dict

from .vocab import train_vocab

#: Where ``python -m training...`` finds the package (the repository, or the image's work dir).
PACKAGE_ROOT = Path(__file__).resolve().parents[2]
#: ``training.dataprep.prepare_data`` flags of the small shard sets the tests and the XLA bench train on:
#: pretrain's default sample shape, two passes over the corpus (other masks), one worker process.
SMALL_SET_FLAGS: Mapping[str, int] = {
    "max_seq_len": 128,
    "max_pred_len": 20,
    "dupe_factor": 2,
    "num_workers": 1,
    "seed": 7,
}

_COMMON = (
    "the of and to in a is that for it as was with be by on not he this are or his from at which "
    "but have an they you were her she there been one all we their has would when if so no will "
    "more about can out them what some time could into only new other then these two may first "
    "any like now my such make over our even most after also did many before must through years "
    "where much way well down should because each just those people how too little state good "
    "very world still own see men work long here between both life being under never day same "
    "another know while last might great old year off come since against go came right used take "
    "three river mountain harbour village winter summer garden letter window morning evening "
    "question answer history government country science language music family market voyage"
).split()
_SYLLABLES = (
    "ka lo min tra ver sen pol du ri ne sto gal bri en mor tha pli cu vo zan el qui ros fen "
    "dor ha ment ti ble ous ing ate ion al"
).split()


def _made_up_words(rng: random.Random, count: int) -> list[str]:
    words: set[str] = set()
    while len(words) < count:
        words.add("".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 4))))
    return sorted(words)


def write_corpus(
    path: str | os.PathLike[str],
    n_docs: int = 40,
    seed: int = 0,
    sentences_per_doc: tuple[int, int] = (2, 30),
    words_per_sentence: tuple[int, int] = (3, 24),
) -> Path:
    """Write a synthetic corpus: one sentence per line, one blank line between documents.

    Args:
        path: file to write (parent folders are created).
        n_docs: number of documents.
        seed: same seed and arguments give the same file, byte for byte.
        sentences_per_doc: inclusive range of sentences in a document.
        words_per_sentence: inclusive range of words in a sentence (before punctuation).

    Returns:
        The path written.
    """
    rng = random.Random(seed)
    # Common words take the frequent ranks so the text reads like (odd) English.
    common, made_up = list(_COMMON), _made_up_words(rng, 400)
    rng.shuffle(common)
    rng.shuffle(made_up)
    vocabulary = common + made_up
    cumulative = list(accumulate(1.0 / (rank + 1) for rank in range(len(vocabulary))))
    documents = []
    for _ in range(n_docs):
        sentences = []
        for _ in range(rng.randint(*sentences_per_doc)):
            words = rng.choices(vocabulary, cum_weights=cumulative, k=rng.randint(*words_per_sentence))
            if len(words) > 6 and rng.random() < 0.3:
                words[rng.randrange(1, len(words) - 1)] += ","
            sentences.append(" ".join(words).capitalize() + rng.choice(".....?!"))
        documents.append("\n".join(sentences) + "\n")
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(documents), encoding="utf-8")
    return out


def gutenberg_books(corpus: str | os.PathLike[str]) -> list[str]:
    """The documents of a :func:`write_corpus` corpus as PG-19 keeps a book's text: Gutenberg's
    line wrapping (lines of at most 70 characters), three sentences a paragraph, paragraphs apart
    by a blank line."""
    books = []
    for document in Path(corpus).read_text(encoding="utf-8").strip().split("\n\n"):
        lines = document.splitlines()
        paragraphs = [" ".join(lines[i : i + 3]) for i in range(0, len(lines), 3)]
        books.append("\n\n".join(textwrap.fill(p, 70) for p in paragraphs) + "\n")
    return books


def pg19_parquet(path: str | os.PathLike[str], books: Sequence[tuple[str, str]]) -> Path:
    """``(title, text)`` books as a Parquet file of the PG-19 loader's columns (huggingface/datasets
    ``datasets/pg19/pg19.py`` at 9c2a18db: ``short_book_title`` string, ``publication_date``
    int32, ``url`` string, ``text`` string), in two row groups: the held-out staging's source."""
    import pyarrow as pa  # only the held-out tool's tests and the rehearsal make one
    import pyarrow.parquet as pq

    table = pa.table(
        {
            "short_book_title": pa.array([t for t, _ in books], pa.string()),
            "publication_date": pa.array([1900 + i for i in range(len(books))], pa.int32()),
            "url": pa.array([f"http://www.gutenberg.org/ebooks/{10000 + i}" for i in range(len(books))]),
            "text": pa.array([b for _, b in books], pa.string()),
        }
    )
    pq.write_table(table, path, row_group_size=max(1, len(books) // 2))
    return Path(path)


def build_vocab(
    corpus_paths: Sequence[str | os.PathLike[str]],
    out_path: str | os.PathLike[str],
    vocab_size: int = 400,
) -> Path:
    """Train a lower-cased WordPiece vocab.txt on ``corpus_paths`` with ``training.dataprep.vocab``.

    A small ``vocab_size`` (the default 400 for a ``write_corpus`` corpus) keeps the common
    words whole and splits the made-up ones into pieces. Two builds on the same corpus may
    differ in a few tokens (see ``training.dataprep.vocab``): build one per test session or module and
    share it when results must be compared. Returns ``out_path``.
    """
    return train_vocab(corpus_paths, out_path, vocab_size=vocab_size, min_frequency=2)


def prepare_data_command(**flags: str | int | float | bool | os.PathLike[str] | None) -> list[str]:
    """``python -m training.dataprep.prepare_data`` with ``flags`` (``input=``, ``vocab=``, ``output_dir=``...).

    Rendered as the job renders script flags (``trainium_job.launch.script_args_from_dict``):
    ``True`` is a bare switch, ``False`` and ``None`` are left out, paths become strings.
    """
    values = {k: os.fspath(v) if isinstance(v, os.PathLike) else v for k, v in flags.items()}
    return [sys.executable, "-m", "training.dataprep.prepare_data", *script_args_from_dict(values)]


@dataclass(frozen=True)
class SyntheticShards:
    """A shard set written by ``python -m training.dataprep.prepare_data``, and its vocab."""

    dir: Path
    vocab: Path

    @property
    def vocab_size(self) -> int:
        with open(self.vocab, encoding="utf-8") as f:
            return sum(1 for _ in f)

    @property
    def files(self) -> list[Path]:
        return sorted(self.dir.glob("*_training_*.hdf5"))


def make_shards(
    root: str | os.PathLike[str],
    *,
    n_docs: int,
    flags: Mapping[str, str | int | float | bool | None],
    corpus_seed: int = 0,
    vocab_size: int = 400,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
) -> SyntheticShards:
    """Corpus (``root/corpus.txt``) -> vocab (``root/vocab.txt``) -> shards (``root/shards``).

    ``flags`` go to ``training.dataprep.prepare_data`` as they are (``prepare_data_command``). The tool
    runs in a fresh process (``env``: its environment, default this one's); a failure raises
    with the end of its stderr.
    """
    root = Path(root)
    corpus = write_corpus(root / "corpus.txt", n_docs=n_docs, seed=corpus_seed)
    vocab = build_vocab([corpus], root / "vocab.txt", vocab_size=vocab_size)
    shards = SyntheticShards(root / "shards", vocab)
    command = prepare_data_command(input=corpus, vocab=vocab, output_dir=shards.dir, **flags)
    done = subprocess.run(
        command, cwd=PACKAGE_ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}: {done.stderr[-2000:]}")
    return shards
