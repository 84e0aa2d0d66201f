"""The work units of data preparation and the functions worker processes run on them.

A unit is a byte range of one input file ending at a blank line (``plan_chunks``). Each unit is
tokenized (``tokenize_unit``), its documents saved in the work folder; the random-next pool is
gathered from them (``build_pool``); each unit's samples are made (``unit_records``, with
``training.dataprep.bert_samples``) into a record file of its own; each shard's samples are gathered from
those files and written (``write_shard``). The same functions run in the processes of
``training.dataprep.prep_pipeline`` and on the pods of ``training.dataprep.prepare_indexed``, so the output does
not depend on how many share the work.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import BinaryIO, Literal

import numpy as np
from tokenizers import Tokenizer

from . import interrupt
from .bert_samples import (
    SHUFFLE,
    PrepConfig,
    TokenizedChunk,
    VocabInfo,
    concatenate,
    pool_keep,
    record_dtype,
    rngs,
    unit_samples,
)
from .shard_format import ShardEntry, shard_entry
from .shard_writer import write_hdf5
from .text_input import decode_chunk
from .vocab import WordPieceEncoder, load_vocab

_ENCODE_BATCH = 4096  # sentences per encode call: bounds the Encoding objects alive at once


@dataclass(frozen=True)
class Chunk:
    """A byte range of one input file that starts and ends at a document boundary."""

    file_index: int
    chunk_index: int
    path: str
    start: int
    end: int


def plan_chunks(files: Sequence[Path], chunk_bytes: int) -> list[Chunk]:
    """Cut every file into chunks of at least ``chunk_bytes`` ending after a blank line.

    Only the bytes near each cut are read. A document longer than ``chunk_bytes`` stays whole.
    """
    chunks = []
    for file_index, path in enumerate(files):
        size = path.stat().st_size
        with open(path, "rb") as handle:
            start, chunk_index = 0, 0
            while start < size:
                end = _document_boundary_after(handle, start + chunk_bytes, size)
                chunks.append(Chunk(file_index, chunk_index, str(path), start, end))
                start, chunk_index = end, chunk_index + 1
    return chunks


def _document_boundary_after(handle: BinaryIO, offset: int, size: int) -> int:
    """Offset just past the first blank line that starts after ``offset`` (or the file end)."""
    if offset >= size:
        return size
    handle.seek(offset)
    handle.readline()  # the rest of the line the offset falls in
    while line := handle.readline():
        if not line.strip():
            return handle.tell()
    return size


def tokenize_documents(text: str, tokenizer: Tokenizer | WordPieceEncoder) -> TokenizedChunk:
    """Split ``text`` into documents (blank lines) and sentences (lines) and tokenize them.

    Lines that tokenize to nothing are dropped; so are documents left without sentences.
    """
    sentences: list[str] = []
    document_of: list[int] = []
    document, inside = 0, False
    for line in text.split("\n"):
        line = line.strip()
        if line:
            sentences.append(line)
            document_of.append(document)
            inside = True
        elif inside:
            document, inside = document + 1, False
    id_lists: list[list[int]] = []
    for begin in range(0, len(sentences), _ENCODE_BATCH):
        batch = sentences[begin : begin + _ENCODE_BATCH]
        if isinstance(tokenizer, WordPieceEncoder):
            id_lists.extend(tokenizer.encode(batch))
        else:
            id_lists.extend(
                encoding.ids for encoding in tokenizer.encode_batch_fast(batch, add_special_tokens=False)
            )
    lengths = np.fromiter(map(len, id_lists), dtype=np.int64, count=len(id_lists))
    tokens = np.fromiter(chain.from_iterable(id_lists), dtype=np.int32, count=int(lengths.sum()))
    keep = lengths > 0
    lengths, documents = lengths[keep], np.asarray(document_of, dtype=np.int64)[keep]
    new_document = np.flatnonzero(np.diff(documents)) + 1
    return TokenizedChunk(
        tokens=tokens,
        sentence_starts=np.concatenate(([0], np.cumsum(lengths))),
        document_starts=np.concatenate(([0], new_document, [lengths.size]) if lengths.size else ([0],)),
    )


# ---------------------------------------------------------------------------------------------
# Worker processes


@dataclass
class _WorkerState:
    cfg: PrepConfig
    vocab: VocabInfo
    encoder: WordPieceEncoder
    dtype: np.dtype
    pool: tuple[str, TokenizedChunk] | None = None  # (folder, the memory-mapped pool)
    encoding: str = "utf-8"
    errors: str = "strict"


_STATE: _WorkerState | None = None


def _single_threaded_tokenizer() -> None:
    # One tokenizer thread per worker process: the processes already fill the cores.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"


# glibc's mallopt parameters (malloc.h) and the values set: see ``_reuse_freed_memory``.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_MMAP_THRESHOLD_BYTES = 256 << 20


def _reuse_freed_memory() -> None:
    """Let this process reuse the memory it frees instead of handing it back to the kernel.

    Every work item allocates and frees arrays of several MB. glibc maps blocks above its
    mmap threshold afresh and gives freed heap above its trim threshold back, so items kept
    page-faulting their arrays in again (the first shard a worker wrote took 0.22 s instead of
    0.17 s). With both thresholds raised the process keeps its high-water mark and reuses it;
    forked workers inherit the setting. Peak memory does not grow with the corpus either way.
    Does nothing outside glibc.
    """
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return
        libc = ctypes.CDLL(None)
    except (ValueError, OSError):
        return
    libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_BYTES)
    libc.mallopt(_M_TRIM_THRESHOLD, 2 * _MMAP_THRESHOLD_BYTES)


def init_forked_worker() -> None:
    """Set-up of a worker forked from a process that ran ``init_worker``: it inherits the state."""
    _single_threaded_tokenizer()
    interrupt.ignore_interactive_interrupt()


def init_worker(
    vocab_path: str,
    cfg: PrepConfig,
    single_threaded_tokenizer: bool,
    encoding: str = "utf-8",
    errors: str = "strict",
) -> None:
    """Load the vocab and tokenizer into this process's state, which the unit functions use."""
    global _STATE
    _reuse_freed_memory()  # first: flash-tokenizer's tables are allocated below
    if single_threaded_tokenizer:
        _single_threaded_tokenizer()
        interrupt.ignore_interactive_interrupt()
    vocab, info = load_vocab(vocab_path)
    _STATE = _WorkerState(
        cfg,
        info,
        WordPieceEncoder(vocab_path, cfg.lower_case, vocab),
        record_dtype(cfg, info.size),
        encoding=encoding,
        errors=errors,
    )


def _token_type(vocab_size: int) -> type:
    return np.uint16 if vocab_size <= 1 << 16 else np.uint32


def save_documents(folder: Path, documents: TokenizedChunk) -> None:
    """Store tokenized documents as .npy files that ``load_documents`` can memory-map."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("tokens", "sentence_starts", "document_starts", "document_ids"):
        np.save(folder / f"{name}.npy", getattr(documents, name))


def load_documents(folder: Path, mmap: bool = False) -> TokenizedChunk:
    mode: Literal["r"] | None = "r" if mmap else None
    arrays = {
        name: np.load(folder / f"{name}.npy", mmap_mode=mode)
        for name in ("tokens", "sentence_starts", "document_starts", "document_ids")
    }
    return TokenizedChunk(**arrays)


@dataclass
class _TokenizeResult:
    documents: int
    tokens: int
    unknown: int
    bytes: int


def tokenize_unit(job: tuple[Chunk, str]) -> _TokenizeResult:
    """Phase 1 of a unit: its text, tokenized, saved in the work folder."""
    assert _STATE is not None
    chunk, folder = job
    with open(chunk.path, "rb") as handle:
        handle.seek(chunk.start)
        raw = handle.read(chunk.end - chunk.start)
    text = decode_chunk(raw, chunk.path, chunk.start, _STATE.encoding, _STATE.errors)
    del raw  # the text is all that is needed now; don't hold both through tokenization
    tokenized = tokenize_documents(text, _STATE.encoder)
    unknown = int(np.count_nonzero(tokenized.tokens == _STATE.vocab.unk_id))
    tokenized.tokens = tokenized.tokens.astype(_token_type(_STATE.vocab.size))
    save_documents(Path(folder), tokenized)
    return _TokenizeResult(
        tokenized.num_documents, int(tokenized.tokens.size), unknown, chunk.end - chunk.start
    )


def unit_records(job: tuple[int, str, int, str]) -> int:
    """Phase 2 of a unit: its samples, given the pool (mapped once per process), written to
    the unit's spool file; returns their number."""
    assert _STATE is not None
    unit_index, folder, first_document, pool_folder = job
    if _STATE.pool is None or _STATE.pool[0] != pool_folder:
        _STATE.pool = (pool_folder, load_documents(Path(pool_folder), mmap=True))
    unit = load_documents(Path(folder))
    unit.document_ids = unit.document_ids + first_document
    records = unit_samples(unit_index, unit, _STATE.pool[1], _STATE.cfg, _STATE.vocab)
    records.tofile(Path(folder) / "records.bin")
    return len(records)


def write_shard(job: tuple[list[tuple[str, int]], str, str, int]) -> ShardEntry:
    """Gather one shard's records from the spool (where its label is), shuffle them and write
    them as HDF5; returns its manifest entry. The spool is the units' record files in order."""
    assert _STATE is not None
    spool, labels, out, shard = job
    mine = np.flatnonzero(np.load(labels, mmap_mode="r") == shard)
    parts: list[np.ndarray] = []
    offset = 0
    for path, count in spool:
        local = mine[(mine >= offset) & (mine < offset + count)] - offset
        # An empty file cannot be memory-mapped: a unit may make no sample.
        empty = np.empty(0, dtype=_STATE.dtype)
        parts.append(np.memmap(path, dtype=_STATE.dtype, mode="r", shape=(count,))[local] if count else empty)
        offset += count
    records = np.concatenate(parts)
    _, np_rng = rngs(_STATE.cfg.seed, SHUFFLE, shard)
    write_hdf5(Path(out), records, _STATE.cfg, order=np_rng.permutation(len(records)))
    return shard_entry(out, len(records))


def build_pool(
    folders: Sequence[str],
    documents: Sequence[int],
    tokens: int,
    pool_tokens: int,
    seed: int,
    pool_folder: Path,
) -> np.ndarray:
    """Gather the random-next pool from the tokenized units (``documents`` per unit, ``tokens``
    in all) into ``pool_folder``; returns each unit's first document number."""
    first_document = np.concatenate(([0], np.cumsum(documents))).astype(np.int64)
    keep_probability = min(1.0, pool_tokens / max(1, tokens))
    parts = []
    for k, folder in enumerate(folders):
        unit = load_documents(Path(folder), mmap=True)
        unit.document_ids = unit.document_ids + first_document[k]
        keep = pool_keep(seed, k, unit.num_documents, keep_probability)
        parts.append(unit if keep.all() else unit.select(keep))
    save_documents(pool_folder, concatenate(parts))
    return first_document
