"""Small deterministic corpora and vocabularies for tests of the training package.

Typical use (shards in a temporary directory, in a few seconds on one core)::

    from tests.training.corpus import build_vocab, write_corpus
    from training.bert_samples import PrepConfig
    from training.prep_pipeline import prepare_shards

    corpus = write_corpus(tmp_path / "corpus.txt", n_docs=40, seed=0)
    vocab = build_vocab([corpus], tmp_path / "vocab.txt", vocab_size=400)
    prepare_shards([corpus], vocab, tmp_path / "shards", PrepConfig(dupe_factor=1), num_shards=2)

The text is English-looking but synthetic: words drawn with a Zipf-like frequency from a fixed
list of common words plus made-up multi-syllable words, so that a small vocabulary splits many
words into ``##`` pieces (which whole-word masking needs). Same arguments, same bytes.
"""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from itertools import accumulate
from pathlib import Path

from training.vocab import train_vocab

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


def build_vocab(
    corpus_paths: Sequence[str | os.PathLike[str]],
    out_path: str | os.PathLike[str],
    vocab_size: int = 400,
) -> Path:
    """Train a lower-cased WordPiece vocab.txt on ``corpus_paths`` with ``training.vocab``.

    A small ``vocab_size`` (the default 400 for a ``write_corpus`` corpus) keeps the common
    words whole and splits the made-up ones into pieces. Two builds on the same corpus may
    differ in a few tokens (see ``training.vocab``): build one per test session or module and
    share it when results must be compared. Returns ``out_path``.
    """
    return train_vocab(corpus_paths, out_path, vocab_size=vocab_size, min_frequency=2)
