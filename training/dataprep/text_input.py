"""Corpus input of the data tools: which files (``expand_inputs``: a directory's ``*.txt`` unless
``--input_pattern`` says otherwise), whether they are text and hold any, decoding that names the
first bad byte, and the one-line errors of their CLIs.

``prepare_data`` reads its corpus as byte ranges (chunks) that end at blank lines, so an
encoding must keep ``\\n`` and ASCII as single bytes (UTF-8, Latin-1, cp1252, ...).
"""

from __future__ import annotations

import argparse
import codecs
import fnmatch
import os
from collections.abc import Iterable, Sequence
from pathlib import Path


class UsageError(ValueError):
    """A user error the CLIs report as one line (exit code 2) instead of a traceback."""


ERROR_MODES = ("strict", "replace")
#: Which files of a directory given as ``--input`` are corpus files (``--input_pattern``).
DEFAULT_INPUT_PATTERN = "*.txt"
_SNIFF_BYTES = 8192
#: Leading bytes of formats given to a text tool by mistake (each format's documented magic number).
_SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"\x89HDF\r\n\x1a\n", "an HDF5 file"),
    (b"\x1f\x8b", "a gzip archive"),
    (b"PK\x03\x04", "a zip archive"),
    (b"\xfd7zXZ\x00", "an xz archive"),
    (b"(\xb5/\xfd", "a zstd archive"),
    (b"7z\xbc\xaf'\x1c", "a 7z archive"),
    (b"%PDF-", "a PDF document"),
)
_TAR_MAGIC_OFFSET, _TAR_MAGIC = 257, b"ustar"


def binary_kind(head: bytes) -> str | None:
    """What the first bytes of a file say it is, if they say it is not text."""
    for magic, kind in _SIGNATURES:
        if head.startswith(magic):
            return kind
    if head.startswith(b"BZh") and head[3:4].isdigit() and head[4:10] == b"1AY&SY":
        return "a bzip2 archive"
    if head[_TAR_MAGIC_OFFSET : _TAR_MAGIC_OFFSET + len(_TAR_MAGIC)] == _TAR_MAGIC:
        return "a tar archive"
    nul = head.find(b"\x00")
    if nul >= 0:
        return f"binary data (a NUL byte at offset {nul})"
    return None


def check_text_files(files: list[Path]) -> None:
    """Refuse a corpus file that starts like a binary file or an archive (one-line UsageError)."""
    for path in files:
        with open(path, "rb") as handle:
            kind = binary_kind(handle.read(_SNIFF_BYTES))
        if kind:
            raise UsageError(
                f"--input {path}: is {kind}, not text; give plain text files (one sentence per line, "
                "blank line between documents): unpack archives first, and leave shards out of the corpus"
            )


def check_encoding(encoding: str, errors: str) -> None:
    """The codec must exist and keep newlines and ASCII as single bytes."""
    try:
        codecs.lookup(encoding)
    except LookupError:
        raise UsageError(f"--encoding {encoding}: unknown encoding; e.g. utf-8, latin-1, cp1252") from None
    if "\n a\n".encode(encoding, errors="replace") != b"\n a\n":
        raise UsageError(
            f"--encoding {encoding}: not ASCII-compatible (newlines are not single bytes); convert the "
            "corpus to UTF-8 first, e.g. with iconv"
        )
    if errors not in ERROR_MODES:
        raise UsageError(f"--errors {errors}: choose one of {', '.join(ERROR_MODES)}")


def decode_chunk(raw: bytes, path: str | os.PathLike[str], start: int, encoding: str, errors: str) -> str:
    """Decode the bytes ``raw`` read from ``path`` at offset ``start``.

    Raises:
        UsageError: a NUL byte (binary data inside the file), or, with ``errors="strict"``, a byte
            sequence that is invalid in ``encoding``: the message names the file, the line and
            the byte offset.
    """
    nul = raw.find(b"\x00")
    if nul >= 0:
        line = _line_number(path, start, raw, nul)
        raise UsageError(
            f"--input {path}: binary data (NUL byte) at line {line}, byte offset {start + nul}; "
            "give plain text files"
        )
    try:
        return raw.decode(encoding, errors=errors)
    except UnicodeDecodeError as err:
        line = _line_number(path, start, raw, err.start)
        bad = raw[err.start : min(err.end, err.start + 4)]
        raise UsageError(
            f"--input {path}: invalid {encoding} at line {line}, byte offset {start + err.start} "
            f"({bad!r}); give --encoding if the file uses another one (e.g. latin-1), or --errors "
            "replace to turn invalid bytes into U+FFFD"
        ) from None


def _line_number(path: str | os.PathLike[str], start: int, raw: bytes, index: int) -> int:
    """1-based line of byte ``start + index`` (reads the file up to ``start``: errors only)."""
    before = 0
    with open(path, "rb") as handle:
        remaining = start
        while remaining > 0:
            block = handle.read(min(remaining, 1 << 20))
            if not block:
                break
            before += block.count(b"\n")
            remaining -= len(block)
    return before + raw.count(b"\n", 0, index) + 1


class OneLineArgumentParser(argparse.ArgumentParser):
    """argparse parser whose errors are a single ``prog: error: ...`` line, exit code 2.

    The usage block argparse normally prints before the error is several lines long for these
    tools and hides the message; ``--help`` still shows it.
    """

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def expand_inputs(
    inputs: Iterable[str | os.PathLike[str]], pattern: str = DEFAULT_INPUT_PATTERN
) -> list[Path]:
    """Return the corpus files named by ``inputs``.

    Files are kept in the order given, whatever their names; a directory contributes the regular
    files below it, recursively, whose names match ``pattern`` (shell-style, e.g. ``*.txt``), in
    sorted path order, skipping hidden files and folders (names starting with a dot). The order
    matters: ``prepare_data`` derives its random seeds from a file's position.

    Raises:
        UsageError: an input does not exist, or a directory holds no file matching ``pattern``.
    """
    files: list[Path] = []
    for raw in inputs:
        path = Path(raw)
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            found = sorted(
                p
                for p in path.rglob("*")
                if p.is_file()
                and fnmatch.fnmatchcase(p.name, pattern)
                and not any(part.startswith(".") for part in p.relative_to(path).parts)
            )
            if not found:
                raise UsageError(
                    f"--input {raw}: directory holds no file matching {pattern!r}; name the corpus files, "
                    "or give --input_pattern (e.g. '*' for every file)"
                )
            files.extend(found)
        else:
            raise UsageError(f"--input {raw}: no such file or directory")
    return files


def corpus_has_text(files: Sequence[Path]) -> bool:
    """True if any file has a non-whitespace byte; stops at the first one found."""
    for path in files:
        with open(path, "rb") as handle:
            while block := handle.read(1 << 20):
                if block.strip():
                    return True
    return False
