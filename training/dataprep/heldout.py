"""A held-out set for ``--eval_dir``, made from books the training corpus cannot hold.

    python -m training.dataprep.heldout --source URL --data_dir SHARDS --vocab VOCAB \\
        --output_dir DIR --marker FILE [--max_seq_len 128] [--max_pred_len 20] [--samples 10000] \\
        [--num_workers N]

The platform's held-out staging Job runs it (``trainium_eks.jobs.heldout_staging``) once a phase's
shards and their vocabulary are on FSx. It downloads ``--source``, a Parquet file with the columns
of the PG-19 loader (``short_book_title``, ``publication_date``, ``url``, ``text``: one row per
book; huggingface/datasets ``datasets/pg19/pg19.py`` at 9c2a18db, its ``features``), turns the
books into the data tool's input (:func:`write_corpus`: one sentence per line, a blank line between
books), and runs the data tool (``training.dataprep.prepare_data``'s ``prepare_shards``) with the
shards' vocabulary, the phase's sample shape and the shards' casing (:func:`shards_lower_case`).
The set is published whole into ``--output_dir`` with its manifest, which also records the source,
its SHA-256 and the books left out; ``--marker`` is written last. With the marker there it exits at
once.

Why these books: PG-19's test split (DeepMind; Project Gutenberg books published before 1919) is
not Wikipedia, which the public BERT shards are made of. What may still overlap: passages of famous
books that Wikipedia quotes, and the Encyclopaedia Britannica's 11th edition, whose articles
Wikipedia took in whole; its volumes are in PG-19 (``metadata.csv`` lists 57 slices), and every
book whose title names it is left out (:data:`EXCLUDED_TITLE`).

Samples: one pass over the text (``--dupe_factor 1``: each passage once). Should that give fewer
than ``--samples``, the set is made again with as many passes as needed (other masks of the same
text), at most :data:`MAX_DUPE_FACTOR`; the manifest records the passes.

Sentences: PG-19 keeps Gutenberg's line wrapping, paragraphs apart by blank lines. A paragraph's
lines are joined and cut after ``.``, ``!`` or ``?`` (and closing quotes or brackets) followed by
a capital letter or a digit, except after a title (Mr., Dr., St. ...) or an initial: a simple rule,
good enough for where a sample's segments may end. PG-19's ``<DW>`` placeholders stay as they are.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import math
import os
import re
import shutil
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from . import interrupt
from .prep_settings import PrepConfig
from .shard_format import ShardSetError, read_manifest, write_manifest
from .text_input import UsageError

#: Books whose title matches are left out: the Encyclopaedia Britannica (11th edition), which
#: Wikipedia incorporates (PG-19 ``metadata.csv``: "Encyclopaedia Britannica 11th Edition Volume
#: ... Slice ..." and "... 11th Ed. ...").
EXCLUDED_TITLE = re.compile(r"\bbritannica\b", re.IGNORECASE)
#: The columns read from the source (the PG-19 loader's features).
TITLE_COLUMN = "short_book_title"
TEXT_COLUMN = "text"
#: Most passes over the text (``--dupe_factor``) when one pass gives too few samples.
MAX_DUPE_FACTOR = 10
#: The corpus file the data tool reads (its name is recorded in the manifest's ``inputs``).
CORPUS_NAME = "pg19-test.txt"
#: The shards' name prefix.
OUTPUT_PREFIX = "heldout"

_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")
_SENTENCE_END = re.compile(r"([.!?]+['\"\u2019\u201d)\]]*)\s+(?=['\"\u2018\u201c(\[]*[A-Z0-9])")
_LAST_WORD = re.compile(r"(\S+)$")
_CONTROL = {c: None for c in range(32) if chr(c) not in "\n\t"}
#: Words before a full stop that does not end a sentence.
_TITLES = frozenset(
    "mr mrs ms messrs mme mlle dr st rev prof capt col gen lieut lt sgt sir jr sr no vol ch chap "
    "fig viz vs".split()
)


def sentences(paragraph: str) -> list[str]:
    """The sentences of one paragraph (its lines joined), each with at least one letter or digit."""
    text = " ".join(paragraph.split())
    found, start = [], 0
    for match in _SENTENCE_END.finditer(text):
        word = _LAST_WORD.search(text[start : match.start()])
        stem = word.group(1).lstrip("\"'(\u2018\u201c[").lower() if word else ""
        if match.group(1) == "." and (stem in _TITLES or (len(stem) == 1 and stem.isalpha())):
            continue
        found.append(text[start : match.end(1)])
        start = match.end()
    found.append(text[start:])
    return [s for s in found if any(c.isalnum() for c in s)]


def book_lines(text: str) -> list[str]:
    """A book's sentences, one per item, in order (no blank ones)."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").translate(_CONTROL)
    return [s for paragraph in _PARAGRAPH_BREAK.split(text) for s in sentences(paragraph)]


@dataclass(frozen=True)
class CorpusSummary:
    """What :func:`write_corpus` wrote: books read, books left out (titles), sentences, bytes."""

    books: int
    excluded: tuple[str, ...]
    sentences: int
    bytes: int


def write_corpus(books: Iterable[tuple[str, str]], out: TextIO) -> CorpusSummary:
    """``(title, text)`` of each book -> the data tool's input on ``out``: one sentence per line, a
    blank line between books; a book :data:`EXCLUDED_TITLE` matches is left out."""
    read, excluded, lines, written = 0, [], 0, 0
    for title, text in books:
        read += 1
        if EXCLUDED_TITLE.search(title or ""):
            excluded.append(title)
            continue
        book = book_lines(text or "")
        if not book:
            continue
        chunk = ("\n" if written else "") + "\n".join(book) + "\n"
        out.write(chunk)
        written += len(chunk.encode("utf-8"))
        lines += len(book)
    return CorpusSummary(read, tuple(excluded), lines, written)


def parquet_books(path: str | os.PathLike[str]) -> Iterator[tuple[str, str]]:
    """``(short_book_title, text)`` of each row of a PG-19 Parquet file.

    Raises:
        UsageError: not a Parquet file, or without the columns.
    """
    import pyarrow.parquet as pq  # the data tool itself does not need it

    try:
        source = pq.ParquetFile(path)
    except Exception as err:  # pyarrow's ArrowInvalid and OSError alike
        raise UsageError(f"--source {path}: not a Parquet file ({err})") from None
    names = set(source.schema_arrow.names)
    missing = [c for c in (TITLE_COLUMN, TEXT_COLUMN) if c not in names]
    if missing:
        raise UsageError(
            f"--source {path}: no column {', '.join(missing)} (it has {', '.join(sorted(names))}); "
            "give a Parquet file with PG-19's columns"
        )
    for batch in source.iter_batches(batch_size=4, columns=[TITLE_COLUMN, TEXT_COLUMN]):
        yield from zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=True)


def shards_lower_case(data_dir: str | os.PathLike[str], vocab: str | os.PathLike[str]) -> tuple[bool, str]:
    """Whether the shards at ``data_dir`` were lower-cased, and how that is known: their manifest's
    ``lower_case`` (a set the data tool made), else their vocabulary's tokens (a lower-cased
    vocabulary, such as Google's uncased one the public shards were made with, has no upper-case
    letter outside its ``[...]`` special tokens)."""
    try:
        recorded = read_manifest(data_dir).settings.get("lower_case")
    except ShardSetError:
        recorded = None
    if isinstance(recorded, bool):
        return recorded, f"the manifest of {data_dir}"
    with open(vocab, encoding="utf-8") as handle:
        cased = next(
            (t for t in (line.rstrip("\n") for line in handle) if not t.startswith("[") and t != t.lower()),
            None,
        )
    if cased is None:
        return True, f"{vocab} has no upper-case token"
    return False, f"{vocab} has upper-case tokens ({cased!r})"


def download(url: str, dest: Path) -> str:
    """``url`` into ``dest`` (redirects followed); its SHA-256."""
    digest = hashlib.sha256()
    with urllib.request.urlopen(url, timeout=120) as response, open(dest, "wb") as out:
        while block := response.read(1 << 20):
            digest.update(block)
            out.write(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class HeldOutSet:
    """What :func:`make_set` made: the corpus, the casing and why, the passes and the samples."""

    corpus: CorpusSummary
    lower_case: bool
    casing_from: str
    dupe_factor: int
    samples: int


def make_set(
    books: Iterable[tuple[str, str]],
    *,
    data_dir: str | os.PathLike[str],
    vocab: str | os.PathLike[str],
    output_dir: str | os.PathLike[str],
    work_dir: str | os.PathLike[str],
    max_seq_len: int,
    max_pred_len: int,
    samples: int,
    num_workers: int = 1,
    record: dict[str, object] | None = None,
) -> HeldOutSet:
    """The data step: ``books`` -> a shard set in ``output_dir`` (absent or empty) with at least
    ``samples`` samples of ``max_seq_len`` tokens, made with ``vocab`` and the casing of the shards
    at ``data_dir``; ``record`` is added to its manifest's settings. ``work_dir`` holds the corpus.

    Raises:
        UsageError: no text, or fewer than ``samples`` samples after :data:`MAX_DUPE_FACTOR` passes.
    """
    from .prep_pipeline import prepare_shards  # numpy and the tokenizers: not at import

    corpus_dir = Path(work_dir) / "corpus"
    corpus_dir.mkdir(parents=True, exist_ok=True)
    with open(corpus_dir / CORPUS_NAME, "w", encoding="utf-8") as out:
        corpus = write_corpus(books, out)
    if corpus.sentences == 0:
        raise UsageError("--source: no book with text (after leaving out the Britannica)")
    lower, why = shards_lower_case(data_dir, vocab)
    dupe, made = 1, 0
    while True:
        cfg = PrepConfig(
            max_seq_len=max_seq_len, max_pred_len=max_pred_len, dupe_factor=dupe, lower_case=lower
        )
        made = prepare_shards(
            [corpus_dir],
            vocab,
            output_dir,
            cfg,
            num_workers=num_workers,
            output_prefix=OUTPUT_PREFIX,
            overwrite=dupe > 1,
        ).samples
        if made >= samples:
            break
        if dupe >= MAX_DUPE_FACTOR:
            raise UsageError(
                f"--samples {samples}: the source gives {made} samples of {max_seq_len} tokens after "
                f"{dupe} passes; lower --samples (the trainer's --eval_samples)"
            )
        dupe = min(MAX_DUPE_FACTOR, max(dupe + 1, math.ceil(dupe * samples / max(made, 1))))
    manifest = read_manifest(output_dir)
    extra = {"excluded": list(corpus.excluded), **(record or {})}
    write_manifest(output_dir, dataclasses.replace(manifest, settings={**manifest.settings, **extra}))
    return HeldOutSet(corpus, lower, why, dupe, made)


def stage(args: argparse.Namespace, say: TextIO = sys.stdout) -> int:
    """The Job's run: the marker, or download, make, publish, mark (see the module docstring)."""
    marker, output = Path(args.marker), Path(args.output_dir)
    if marker.exists():
        print("held-out set already staged", file=say)
        return 0
    output.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{output.name}.heldout-", dir=output.parent))
    try:
        started = time.monotonic()
        source = work / "source.parquet"
        digest = download(args.source, source)
        print(f"downloaded {args.source}: {source.stat().st_size:,} bytes, SHA-256 {digest}", file=say)
        made = make_set(
            parquet_books(source),
            data_dir=args.data_dir,
            vocab=args.vocab,
            output_dir=work / "set",
            work_dir=work,
            max_seq_len=args.max_seq_len,
            max_pred_len=args.max_pred_len,
            samples=args.samples,
            num_workers=args.num_workers,
            record={"source": args.source, "source_sha256": digest},
        )
        with interrupt.deferred_signals():  # published whole and marked, or neither
            if output.exists():  # an interrupted earlier attempt's directory, without the marker
                os.rename(output, work / "replaced")
            os.rename(work / "set", output)
            marker.write_text(f"{made.samples} samples\n")
        interrupt.check()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    c = made.corpus
    print(
        f"held-out set {output}: {made.samples:,} samples of {args.max_seq_len} tokens "
        f"({made.dupe_factor} pass(es)) from {c.books - len(c.excluded)} of {c.books} books "
        f"({c.sentences:,} sentences, {c.bytes:,} bytes), {len(c.excluded)} left out "
        f"({'; '.join(c.excluded) or 'none'}); {'lower-cased' if made.lower_case else 'cased'}: "
        f"{made.casing_from}; {time.monotonic() - started:.0f} s",
        file=say,
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m training.dataprep.heldout", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--source", required=True, help="URL of the books' Parquet file (PG-19's columns)")
    parser.add_argument("--data_dir", required=True, help="the phase's training shards (their casing)")
    parser.add_argument("--vocab", required=True, help="the shards' vocab.txt")
    parser.add_argument("--output_dir", required=True, help="where the held-out set is published")
    parser.add_argument("--marker", required=True, help="written once the set is published")
    parser.add_argument("--max_seq_len", type=int, default=128, help="tokens per sample (default: 128)")
    parser.add_argument(
        "--max_pred_len", type=int, default=20, help="masked positions per sample (default: 20)"
    )
    parser.add_argument(
        "--samples", type=int, default=10000, help="at least this many samples (default: 10000)"
    )
    parser.add_argument("--num_workers", type=int, default=1, help="data tool processes (default: 1)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        with interrupt.stop_on_signals():
            return stage(args)
    except interrupt.Interrupted as stopped:
        print(f"{parser.prog}: {stopped}", file=sys.stderr)
        return stopped.exit_code
    except (UsageError, OSError) as err:
        print(f"{parser.prog}: error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
