"""Build a BERT WordPiece vocabulary (``vocab.txt``) from a text corpus, offline.

    python -m training.dataprep.vocab --input CORPUS_FILE_OR_DIR [...] --output vocab.txt --vocab_size 30522

The corpus format is the one ``training.dataprep.prepare_data`` reads (one sentence per line, blank line
between documents); for vocabulary training only the words matter. Text goes through the same
BERT normalizer and pre-tokenizer that ``prepare_data`` uses, so a vocabulary built here with
``--no_lower_case`` must be used with ``prepare_data --no_lower_case`` too.

Not bit-for-bit reproducible: the ``tokenizers`` trainer breaks ties between equally frequent
merges in hash-map order, so two builds on the same corpus can differ in a few tokens
(huggingface/tokenizers#1794). Build the vocabulary once and keep it with the shards made from it.

The written file has one token per line, line number = token id. The five BERT special tokens
come first ([PAD]=0, [UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4); Google's bert-base-uncased vocab has
them elsewhere ([PAD]=0, [UNK]=100, ...), which is why consumers look ids up by name.
"""

from __future__ import annotations

import argparse
import functools
import importlib.machinery
import importlib.util
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from tokenizers import Tokenizer
from tokenizers.models import WordPiece
from tokenizers.normalizers import BertNormalizer
from tokenizers.pre_tokenizers import BertPreTokenizer
from tokenizers.trainers import WordPieceTrainer

from .bert_samples import VocabInfo
from .text_input import (
    DEFAULT_INPUT_PATTERN,
    OneLineArgumentParser,
    UsageError,
    check_text_files,
    corpus_has_text,
    expand_inputs,
)

SPECIAL_TOKENS: tuple[str, ...] = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
UNK_TOKEN = "[UNK]"
CONTINUATION_PREFIX = "##"


def bert_tokenizer(vocab: dict[str, int] | None, lower_case: bool = True) -> Tokenizer:
    """A ``tokenizers`` WordPiece tokenizer with BERT's normalizer and pre-tokenizer.

    ``vocab=None`` gives an empty model for training. Accents are stripped exactly when
    lower-casing, as in Google's uncased/cased BERT vocabularies. No post-processor is set: the
    caller adds [CLS]/[SEP] itself.
    """
    model = WordPiece(vocab, unk_token=UNK_TOKEN) if vocab is not None else WordPiece(unk_token=UNK_TOKEN)
    tokenizer = Tokenizer(model)
    tokenizer.normalizer = BertNormalizer(clean_text=True, handle_chinese_chars=True, lowercase=lower_case)
    tokenizer.pre_tokenizer = BertPreTokenizer()
    return tokenizer


# Characters flash-tokenizer 1.2.0 handles as ``tokenizers`` does: printable ASCII and common
# typographic punctuation (tested one by one). It differs on other text: lines with combining
# marks, Hebrew points or a byte-order mark come out otherwise (6 of the 160,153 lines of the
# benchmark corpus), and it does not split words at the punctuation marks ¶ « ». BERT splits
# every punctuation mark off as a token of its own, so spaces put around those three first
# change nothing for tokenizers and make flash-tokenizer agree.
FAST_PATH_EXTRA_CHARACTERS = (
    "\u2018\u2019\u201c\u201d\u2013\u2014\u2026\u2022\u00b6\u00ab\u00bb"  # ‘’“”–—…•¶«»
)
_SPACED_PUNCTUATION = {ord(c): f" {c} " for c in "\u00b6\u00ab\u00bb"}
_FAST_LINE = re.compile(f"[\\x20-\\x7e{FAST_PATH_EXTRA_CHARACTERS}]*")
_NEEDS_SPACES = re.compile("[\u00b6\u00ab\u00bb]")


def _flash_core() -> ModuleType:
    """flash-tokenizer's compiled module, without running its package ``__init__``.

    That ``__init__`` imports ``requests`` for downloading pretrained vocabularies, which this
    project never does: about 0.06 s of the data tool's serial start-up. The compiled module
    needs nothing from the package; if it cannot be loaded alone, the plain import is used.
    """
    name = "flash_tokenizer._core"
    if name in sys.modules:
        return sys.modules[name]
    package = importlib.util.find_spec("flash_tokenizer")  # finds, does not run, a top-level package
    folders = list(package.submodule_search_locations or []) if package is not None else []
    spec = importlib.machinery.PathFinder.find_spec(name, folders)
    if spec is None or spec.loader is None:
        import flash_tokenizer._core as core  # type: ignore[import-not-found,unused-ignore]

        return core
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class WordPieceEncoder:
    """BERT WordPiece ids of many lines at once, without [CLS]/[SEP].

    Lines made only of printable ASCII and ``FAST_PATH_EXTRA_CHARACTERS`` go through
    ``flash-tokenizer`` (a C++ BERT WordPiece, about 5x the speed of ``tokenizers`` on one thread
    here); every other line goes through the ``tokenizers`` model of ``bert_tokenizer``. Tests compare the two on every
    line of the test corpora and on each fast-path character alone and inside words.
    """

    def __init__(
        self, vocab_path: str | os.PathLike[str], lower_case: bool = True, vocab: dict[str, int] | None = None
    ) -> None:
        """``vocab``: the file's tokens as ``read_vocab`` gives them, when the caller has read it."""
        FlashBertTokenizer = _flash_core().FlashBertTokenizer  # noqa: N806 (the library's class name)

        self.vocab = read_vocab(vocab_path) if vocab is None else vocab
        self.lower_case = lower_case
        # The length limit is far above any line: nothing is truncated.
        self.fast = FlashBertTokenizer(str(vocab_path), lower_case, 1 << 30, True)

    @functools.cached_property
    def reference(self) -> Tokenizer:
        """The ``tokenizers`` model, made when a line first needs it (few corpora have such lines)."""
        return bert_tokenizer(self.vocab, self.lower_case)

    def encode(self, lines: Sequence[str]) -> list[list[int]]:
        fast_line = _FAST_LINE.fullmatch
        is_fast = [fast_line(line) is not None for line in lines]
        fast_rows = [i for i, fast in enumerate(is_fast) if fast]
        other_rows = [i for i, fast in enumerate(is_fast) if not fast]
        # batch_encode with "none" padding gives [CLS] ids... [SEP] per line; one thread (the
        # data tool's processes already fill the cores).
        needs_spaces = _NEEDS_SPACES.search
        fast_lines = [
            line.translate(_SPACED_PUNCTUATION) if needs_spaces(line) else line
            for line in (lines[i] for i in fast_rows)
        ]
        fast_ids = self.fast.batch_encode(fast_lines, "none", -1, False)
        if not other_rows:
            return [ids[1:-1] for ids in fast_ids]
        out: list[list[int]] = [[] for _ in lines]
        for row, ids in zip(fast_rows, fast_ids, strict=True):
            out[row] = ids[1:-1]
        others = self.reference.encode_batch_fast([lines[i] for i in other_rows], add_special_tokens=False)
        for row, encoding in zip(other_rows, others, strict=True):
            out[row] = encoding.ids
        return out


def read_vocab(path: str | os.PathLike[str]) -> dict[str, int]:
    """Read a ``vocab.txt`` (one token per line; id = line number, first occurrence wins)."""
    vocab: dict[str, int] = {}
    with open(path, encoding="utf-8") as handle:
        for index, line in enumerate(handle):
            vocab.setdefault(line.rstrip("\r\n"), index)
    return vocab


def load_vocab(path: str | os.PathLike[str]) -> tuple[dict[str, int], VocabInfo]:
    """Read and check a vocab.txt for sample-making (the returned objects are shared: read only).

    One result is kept per file version: the data tool checks the vocab while planning, then
    sets up its tokenizer from it before forking its workers, and both are serial start-up time.

    Raises:
        UsageError: missing file, missing special tokens, [PAD] not at id 0 (the format pads
            with 0), or no ordinary token to use as a random replacement.
    """
    if not Path(path).is_file():
        raise UsageError(
            f"--vocab {path}: file not found; build one with "
            f"`python -m training.dataprep.vocab --input <corpus> --output {path}`"
        )
    stat = os.stat(path)
    return _load_checked_vocab(str(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=4)
def _load_checked_vocab(path: str, mtime_ns: int, size: int) -> tuple[dict[str, int], VocabInfo]:
    """``load_vocab`` for one version (modification time and size) of the file."""
    try:
        vocab = read_vocab(path)
    except UnicodeDecodeError:
        raise UsageError(
            f"--vocab {path}: not a UTF-8 text file; a vocab.txt has one token per line"
        ) from None
    missing = [token for token in SPECIAL_TOKENS if token not in vocab]
    if missing:
        raise UsageError(
            f"--vocab {path}: lacks special token(s) {' '.join(missing)}; a BERT vocab needs "
            f"{' '.join(SPECIAL_TOKENS)}: use a BERT vocab.txt or build one with `python -m training.dataprep.vocab`"
        )
    if vocab["[PAD]"] != 0:
        raise UsageError(
            f"--vocab {path}: [PAD] has id {vocab['[PAD]']}, but the shard format pads with 0; "
            "move [PAD] to the first line"
        )
    size = max(vocab.values()) + 1
    tokens = [""] * size
    for token, index in vocab.items():
        tokens[index] = token
    info = VocabInfo.from_tokens(tokens, CONTINUATION_PREFIX)
    if info.replacement_ids.size == 0:
        raise UsageError(
            f"--vocab {path}: has only special tokens; build a real one with `python -m training.dataprep.vocab`"
        )
    return vocab, info


def train_vocab(
    files: Sequence[str | os.PathLike[str]],
    output: str | os.PathLike[str],
    vocab_size: int = 30522,
    lower_case: bool = True,
    min_frequency: int = 2,
    limit_alphabet: int = 1000,
    show_progress: bool = False,
) -> Path:
    """Train a WordPiece vocabulary on ``files`` and write it to ``output`` (parents created).

    The result has at most ``vocab_size`` tokens (fewer when the corpus has fewer distinct
    subwords), the five special tokens first. Returns the output path.
    """
    if vocab_size < len(SPECIAL_TOKENS) + 2:
        raise UsageError(
            f"--vocab_size {vocab_size}: leaves no room for ordinary tokens next to the "
            f"{len(SPECIAL_TOKENS)} special ones; BERT uses 30522"
        )
    tokenizer = bert_tokenizer(None, lower_case)
    trainer = WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        show_progress=show_progress,
        special_tokens=list(SPECIAL_TOKENS),
        # Every kept character enters twice (c and ##c) and is never dropped: leave room for it.
        limit_alphabet=min(limit_alphabet, (vocab_size - len(SPECIAL_TOKENS)) // 2),
        continuing_subword_prefix=CONTINUATION_PREFIX,
    )
    tokenizer.train([str(f) for f in files], trainer)
    vocab = tokenizer.get_vocab()
    tokens = sorted(vocab, key=vocab.__getitem__)
    if tuple(tokens[: len(SPECIAL_TOKENS)]) != SPECIAL_TOKENS or len(tokens) > vocab_size:
        raise RuntimeError(
            f"WordPiece trainer returned an unexpected vocabulary layout ({len(tokens)} tokens)"
        )
    out = Path(output)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    partial.write_text("".join(f"{token}\n" for token in tokens), encoding="utf-8")
    partial.replace(out)
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(
        prog="python -m training.dataprep.vocab",
        description="Build a BERT WordPiece vocab.txt from a corpus (one sentence per line), offline.",
    )
    parser.add_argument("--input", nargs="+", required=True, help="corpus file(s) or directories")
    parser.add_argument(
        "--input_pattern",
        default=DEFAULT_INPUT_PATTERN,
        help=f"which files of a directory in --input are read, recursively (default: {DEFAULT_INPUT_PATTERN})",
    )
    parser.add_argument("--output", required=True, help="vocab.txt to write")
    parser.add_argument("--vocab_size", type=int, default=30522, help="upper bound on the token count")
    parser.add_argument("--min_frequency", type=int, default=2, help="minimum count of a merged pair")
    parser.add_argument("--limit_alphabet", type=int, default=1000, help="most single characters kept")
    parser.add_argument("--do_lower_case", dest="lower_case", action="store_true", default=True)
    parser.add_argument("--no_lower_case", dest="lower_case", action="store_false")
    parser.add_argument("--no_progress", action="store_true", help="no progress bar")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        files = expand_inputs(args.input, args.input_pattern)
        check_text_files(files)  # the trainer would read a binary file's bytes as words
        if not corpus_has_text(files):
            raise UsageError(f"--input {' '.join(args.input)}: corpus is empty (only blank lines)")
        if Path(args.output).is_dir():
            raise UsageError(
                f"--output {args.output}: is a directory; name the vocab file, e.g. {args.output}/vocab.txt"
            )
        out = train_vocab(
            files,
            args.output,
            vocab_size=args.vocab_size,
            lower_case=args.lower_case,
            min_frequency=args.min_frequency,
            limit_alphabet=args.limit_alphabet,
            show_progress=not args.no_progress and sys.stderr.isatty(),
        )
    except UsageError as err:
        parser.error(str(err))
    print(f"wrote {len(read_vocab(out))} tokens to {out}")
    return 0


if __name__ == "__main__":
    # The imported module's main: its UsageError is the one training.dataprep.text_input raises (run as
    # a script, this file is a second module, ``__main__``, with classes of its own).
    from .vocab import main as imported_main

    sys.exit(imported_main())
