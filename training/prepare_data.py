"""Turn a text corpus into BERT pretraining shards (masked LM + next-sentence prediction).

    python -m training.prepare_data --input CORPUS_FILE_OR_DIR [...] --vocab vocab.txt \\
        --output_dir DIR [--output_prefix corpus] [--max_seq_len 128] [--max_pred_len 20] \\
        [--masked_lm_prob 0.15] [--short_seq_prob 0.1] [--dupe_factor 5] [--seed 12345] \\
        [--num_workers N] [--num_shards K | --samples_per_shard S] [--whole_word_mask] \\
        [--target_per_sample] [--pool_tokens N] [--do_lower_case | --no_lower_case] \\
        [--no_progress] [--overwrite]

Input: text, one sentence per line, a blank line between documents; UTF-8 unless --encoding
says otherwise. Binary files and archives are refused; an invalid byte is an error naming file,
line and offset unless --errors replace. Output: a shard set (``training.shard_format``): the
directory --output_dir holding ``<prefix>_training_<k>.hdf5`` in the layout of the public
Neuron/NVIDIA shards (``next_sentence_labels`` 1 = B is a random segment; S = --max_seq_len,
P = --max_pred_len) and ``manifest.json``. It is built in a hidden sibling directory and renamed
into place when complete; SIGINT/SIGTERM stop the tool at any phase with exit 130/143 and leave
--output_dir as it was.

Samples: the reference tool's distribution (Google's create_pretraining_data.py, whose NVIDIA
copy made the public shards); the rules, and the few documented differences, are in
``training.bert_samples``, which makes them. ``--target_per_sample`` restores this tool's earlier
draw of the short target per sample instead of per document.

Pipeline, and why its output does not depend on --num_workers:
1. Plan: every input file is cut into units of about --chunk_mb ending at a blank line; a unit
   is fixed by the data alone, and numbered in corpus order.
2. Tokenize, in parallel over units (BERT WordPiece, ``training.vocab.WordPieceEncoder``); each
   unit's token arrays go to the work folder.
3. Pool: the documents "random next" segments are drawn from: the whole corpus up to
   --pool_tokens tokens, else each document kept with the same seeded probability. Written
   once, memory-mapped by every worker.
4. Samples, in parallel over units: ``training.bert_samples.unit_samples`` with RNGs seeded from
   (seed, unit number, pass). Each unit's records go to a spool file of its own, compactly
   (uint16 ids where the vocab allows); together, in unit order, they are the spool.
5. Shuffle, memory-bounded: a seeded random permutation of balanced shard labels (one 2-4 byte
   label per sample) assigns each sample to a shard; each shard's writer gathers its samples
   from the spool and permutes them in memory with its own seed. A uniformly random balanced split
   followed by a uniform order inside each part is a uniform shuffle of the whole set.
6. Write, in parallel over shards: HDF5 with the shuffle and gzip filters (chunks deflated with
   ISA-L), arrays made at their final dtypes; then the manifest (sample counts, SHA-256), and
   publish.
``training.prepare_indexed`` runs steps 2 and 4 on the pods of a Kubernetes Indexed Job with
these same functions, and 3, 5 and 6 on one of them, for the same bytes.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing as mp
import os
import shutil
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass
from itertools import chain
from pathlib import Path
from typing import BinaryIO

import h5py
import numpy as np
from isal import isal_zlib
from tokenizers import Tokenizer
from tqdm import tqdm

from training import interrupt
from training.bert_samples import (
    ROUTE,
    SHUFFLE,
    PrepConfig,
    TokenizedChunk,
    VocabInfo,
    build_pairs,
    concatenate,
    pool_keep,
    record_dtype,
    rngs,
    truncate_pair,
    unit_samples,
)
from training.shard_format import (
    SHARD_FIELDS,
    SHARD_NAME,
    Manifest,
    ShardEntry,
    ShardSetError,
    discard,
    open_staging,
    publish,
    sha256_of,
    shard_entry,
    write_manifest,
)
from training.text_input import ERROR_MODES, check_encoding, check_text_files, decode_chunk
from training.vocab import (
    CONTINUATION_PREFIX,
    SPECIAL_TOKENS,
    OneLineArgumentParser,
    UsageError,
    WordPieceEncoder,
    corpus_has_text,
    expand_inputs,
    read_vocab,
)

__all__ = [  # the sample algorithm lives in training.bert_samples; these names stay importable here
    "PrepConfig",
    "TokenizedChunk",
    "VocabInfo",
    "build_pairs",
    "truncate_pair",
    "prepare_shards",
    "plan_chunks",
    "tokenize_documents",
]

DEFAULT_CHUNK_MB = 2.0  # the work unit: several per process balance the work
DEFAULT_SAMPLES_PER_SHARD = 65536
_ENCODE_BATCH = 4096  # sentences per encode call: bounds the Encoding objects alive at once
# The random-next pool: the whole corpus up to this many tokens (about 130 MB of English text;
# 64 MiB as uint16, memory-mapped and shared by the workers), a uniform sample of documents above.
DEFAULT_POOL_TOKENS = 1 << 25
log = logging.getLogger("training.prepare_data")


def load_vocab(path: str | os.PathLike[str]) -> tuple[dict[str, int], VocabInfo]:
    """Read and check a vocab.txt for sample-making.

    Raises:
        UsageError: missing file, missing special tokens, [PAD] not at id 0 (the format pads
            with 0), or no ordinary token to use as a random replacement.
    """
    if not Path(path).is_file():
        raise UsageError(
            f"--vocab {path}: file not found; build one with "
            f"`python -m training.vocab --input <corpus> --output {path}`"
        )
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
            f"{' '.join(SPECIAL_TOKENS)}: use a BERT vocab.txt or build one with `python -m training.vocab`"
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
            f"--vocab {path}: has only special tokens; build a real one with `python -m training.vocab`"
        )
    return vocab, info


# ---------------------------------------------------------------------------------------------
# Corpus planning and tokenization


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


def _init_forked_worker() -> None:
    _single_threaded_tokenizer()
    interrupt.ignore_interactive_interrupt()


def _init_worker(
    vocab_path: str,
    cfg: PrepConfig,
    single_threaded_tokenizer: bool,
    encoding: str = "utf-8",
    errors: str = "strict",
) -> None:
    global _STATE
    if single_threaded_tokenizer:
        _single_threaded_tokenizer()
        interrupt.ignore_interactive_interrupt()
    _, info = load_vocab(vocab_path)
    _STATE = _WorkerState(
        cfg,
        info,
        WordPieceEncoder(vocab_path, cfg.lower_case),
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
    mode = "r" if mmap else None
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


def _tokenize_chunk(job: tuple[Chunk, str]) -> _TokenizeResult:
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


def _build_unit(job: tuple[int, str, int, str]) -> int:
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


# The unit functions and the process pool, shared with the Indexed-Job workers
# (training.prepare_indexed) so that the pod count cannot change the output.
tokenize_unit = _tokenize_chunk
unit_records = _build_unit


def _write_shard(job: tuple[list[tuple[str, int]], str, str, int]) -> ShardEntry:
    """Gather one shard's records from the spool (where its label is), shuffle them and write
    them as HDF5; returns its manifest entry. The spool is the units' record files in order."""
    assert _STATE is not None
    spool, labels, out, shard = job
    mine = np.flatnonzero(np.load(labels, mmap_mode="r") == shard)
    parts, offset = [], 0
    for path, count in spool:
        local = mine[(mine >= offset) & (mine < offset + count)] - offset
        # An empty file cannot be memory-mapped: a unit may make no sample.
        empty = np.empty(0, dtype=_STATE.dtype)
        parts.append(np.memmap(path, dtype=_STATE.dtype, mode="r", shape=(count,))[local] if count else empty)
        offset += count
    records = np.concatenate(parts)
    _, np_rng = rngs(_STATE.cfg.seed, SHUFFLE, shard)
    records = records[np_rng.permutation(len(records))]
    write_hdf5(Path(out), records, _STATE.cfg)
    return shard_entry(out, len(records))


def write_hdf5(path: Path, records: np.ndarray, cfg: PrepConfig) -> None:
    """Write spool records as one shard in the interchange format (atomically renamed)."""
    pos = np.arange(cfg.max_seq_len, dtype=np.int32)[None, :]
    length = records["length"][:, None].astype(np.int32)
    len_a = records["len_a"][:, None].astype(np.int32)
    values = {
        "input_ids": records["ids"],
        # bool is one byte of 0 or 1: viewing it as int8 saves a copy.
        "input_mask": (pos < length).view(np.int8),
        "segment_ids": ((pos >= len_a + 2) & (pos < length)).view(np.int8),
        "masked_lm_positions": records["positions"],
        "masked_lm_ids": records["labels"],
        "next_sentence_labels": records["next_sentence"],
    }
    arrays = {name: values[name].astype(dtype, copy=False) for name, (dtype, _) in SHARD_FIELDS.items()}
    partial = path.with_name(path.name + ".partial")
    with h5py.File(partial, "w") as handle:
        for name, array in arrays.items():
            _write_gzip_dataset(handle, name, array)
    partial.replace(path)


_CHUNK_ROWS = 1024  # whole-row chunks: readers take runs of samples, never columns


def _write_gzip_dataset(handle: h5py.File, name: str, array: np.ndarray) -> None:
    """A dataset with HDF5's byte-shuffle and gzip (deflate) filters, its chunks compressed here.

    HDF5 would deflate with zlib; ISA-L's deflate (the ``isal`` package) writes the same
    standard stream about 6x faster at level 1, and a little smaller. Each chunk is shuffled as
    the shuffle filter does (all first bytes of the elements, then all second bytes, ...) and
    stored as it is, so any HDF5 reader undoes both filters. Shuffle + deflate level 1 makes
    smaller files than plain gzip level 4 (about 12.8 vs 15.0 MB for 65,536 samples).
    """
    rows = max(1, min(len(array), _CHUNK_ROWS))
    dataset = handle.create_dataset(
        name,
        shape=array.shape,
        dtype=array.dtype,
        chunks=(rows, *array.shape[1:]),
        compression="gzip",
        compression_opts=1,
        shuffle=True,
    )
    width = array.dtype.itemsize
    for start in range(0, len(array), rows):
        block = array[start : start + rows]
        if len(block) < rows:  # an edge chunk is stored whole; rows past the end are never read
            block = np.concatenate([block, np.zeros((rows - len(block), *array.shape[1:]), array.dtype)])
        planes = np.ascontiguousarray(block).view(np.uint8).reshape(-1, width).T
        dataset.id.write_direct_chunk(
            (start,) + (0,) * (array.ndim - 1), isal_zlib.compress(planes.tobytes(), 1)
        )


# ---------------------------------------------------------------------------------------------
# Driver


@dataclass
class PrepSummary:
    """What ``prepare_shards`` produced."""

    shards: list[Path]
    samples: int
    tokens: int
    unknown_tokens: int
    input_bytes: int
    seconds: float


def prepare_shards(
    inputs: Sequence[str | os.PathLike[str]],
    vocab_path: str | os.PathLike[str],
    output_dir: str | os.PathLike[str],
    cfg: PrepConfig = PrepConfig(),
    *,
    num_workers: int = 1,
    num_shards: int | None = None,
    samples_per_shard: int | None = None,
    output_prefix: str = "corpus",
    chunk_bytes: int = int(DEFAULT_CHUNK_MB * (1 << 20)),
    overwrite: bool = False,
    progress: bool | None = False,
    pool_tokens: int = DEFAULT_POOL_TOKENS,
    encoding: str = "utf-8",
    errors: str = "strict",
) -> PrepSummary:
    """Make pretraining shards from a corpus; see the module docstring.

    Args:
        inputs: corpus files or directories (see ``training.vocab.expand_inputs`` for the order).
        vocab_path: vocab.txt with the BERT special tokens, [PAD] on the first line.
        output_dir: the shard set's directory: ``<output_prefix>_training_<k>.hdf5`` and
            ``manifest.json``, published together once complete (see ``training.shard_format``).
        cfg: sample-making parameters.
        num_workers: processes; 1 runs in this process. The output does not depend on it.
            Workers are forked on Linux and spawned elsewhere, where a script calling this
            with more than one needs the ``if __name__ == "__main__":`` guard.
        num_shards: exact number of shards (balanced sizes); exclusive with samples_per_shard.
        samples_per_shard: most samples per shard (default 65536 when neither is given).
        output_prefix: shard name prefix.
        chunk_bytes: target input chunk size (the unit of parallel work and of random
            seeding). Part of the data definition: changing it changes the output.
        pool_tokens: most tokens in the pool that "random next" segments come from: the
            whole corpus when it is smaller, else a uniform sample of its documents. Part of
            the data definition for corpora larger than it.
        overwrite: replace the shard set already in output_dir.
        progress: show tqdm bars; None shows them only on a terminal.
        encoding: of the corpus files (ASCII-compatible); invalid bytes are an error naming
            file, line and offset unless ``errors="replace"``.

    Raises:
        UsageError: a bad argument or input, with a message naming it and the fix.
        training.interrupt.Interrupted: a stop signal (inside ``interrupt.stop_on_signals``);
            nothing is published then.
    """
    started = time.monotonic()
    run = RunSettings(
        num_shards, samples_per_shard, output_prefix, chunk_bytes, pool_tokens, encoding, errors
    )
    plan = plan_run(inputs, vocab_path, output_dir, cfg, run, num_workers)
    staging = open_output(output_dir, overwrite)
    try:
        work_dir = staging / ".work"
        work_dir.mkdir()
        workers = min(num_workers, len(plan.chunks))
        log.info(
            "tokenize+mask: %d unit(s) of %d file(s), %d worker(s)",
            len(plan.chunks),
            len(plan.files),
            workers,
        )
        with _WorkerMap(workers, str(vocab_path), cfg, encoding, errors) as parallel_map:
            totals, spool = _build_all(
                parallel_map, plan.chunks, work_dir, plan.input_bytes, pool_tokens, cfg, progress
            )
            manifest = finish_set(parallel_map, spool, totals.records, plan, staging, work_dir, progress)
        publish_set(staging, output_dir)
    finally:
        discard(staging)  # gone already when published
    return PrepSummary(
        shards=[Path(output_dir) / entry.name for entry in manifest.shards],
        samples=manifest.samples,
        tokens=totals.tokens,
        unknown_tokens=totals.unknown,
        input_bytes=totals.bytes,
        seconds=time.monotonic() - started,
    )


@dataclass(frozen=True)
class RunSettings:
    """What, besides ``PrepConfig``, defines a shard set (and so goes into its manifest)."""

    num_shards: int | None = None
    samples_per_shard: int | None = None
    output_prefix: str = "corpus"
    chunk_bytes: int = int(DEFAULT_CHUNK_MB * (1 << 20))
    pool_tokens: int = DEFAULT_POOL_TOKENS
    encoding: str = "utf-8"
    errors: str = "strict"


@dataclass(frozen=True)
class RunPlan:
    """A checked run: its inputs cut into units of work, and the settings its manifest records."""

    cfg: PrepConfig
    run: RunSettings
    files: list[Path]
    chunks: list[Chunk]
    dtype: np.dtype
    settings: dict

    @property
    def input_bytes(self) -> int:
        return sum(c.end - c.start for c in self.chunks)


def plan_run(
    inputs: Sequence[str | os.PathLike[str]],
    vocab_path: str | os.PathLike[str],
    output_dir: str | os.PathLike[str],
    cfg: PrepConfig,
    run: RunSettings,
    num_workers: int = 1,
) -> RunPlan:
    """Check all that can be checked before work starts, and cut the input into units.

    A pure function of the inputs and settings: every Indexed-Job pod computes the same plan.
    """
    cfg.validate()
    _check_run_args(num_workers, run.num_shards, run.samples_per_shard, run.output_prefix, run.chunk_bytes)
    if run.pool_tokens < 1:
        raise UsageError(
            f"--pool_tokens {run.pool_tokens}: must be at least 1; the default is {DEFAULT_POOL_TOKENS}"
        )
    check_encoding(run.encoding, run.errors)
    files = expand_inputs(inputs)
    out_dir = Path(output_dir)
    inside = [f for f in files if out_dir.resolve() in f.resolve().parents]
    if inside:
        raise UsageError(
            f"--output_dir {output_dir}: holds input file {inside[0]}; a second run would read the "
            "shards as text: put the shards outside the corpus folder"
        )
    check_text_files(files)
    if not corpus_has_text(files):
        raise UsageError(
            f"--input {' '.join(map(str, inputs))}: corpus is empty (only blank lines); expected one "
            "sentence per line and a blank line between documents"
        )
    _, info = load_vocab(vocab_path)
    root = os.path.commonpath([str(f.resolve().parent) for f in files])
    settings = {
        "tool": "training.prepare_data",
        **{k: v for k, v in asdict(cfg).items() if k != "seed"},
        **asdict(run),
        "vocab_sha256": sha256_of(vocab_path),
        # Relative names: the same corpus gives the same manifest wherever it is mounted.
        "inputs": [{"file": os.path.relpath(f.resolve(), root), "bytes": f.stat().st_size} for f in files],
    }
    chunks = plan_chunks(files, run.chunk_bytes)
    return RunPlan(cfg, run, files, chunks, record_dtype(cfg, info.size), settings)


def finish_set(
    parallel_map: Callable[[Callable, Iterable], Iterator],
    spool: Sequence[tuple[str, int]],
    samples: int,
    plan: RunPlan,
    staging: Path,
    work_dir: Path,
    progress: bool | None,
) -> Manifest:
    """Shuffle the spooled samples (the spool: each unit's record file and count, in unit order)
    into shards, write them and the manifest into ``staging``. ``work_dir`` (for the shard
    labels) is deleted; the spool is left to the caller, so a restarted cluster worker can run
    this again."""
    if samples == 0:
        raise UsageError("--input: no line produced a token; nothing to write")
    num_shards = plan.run.num_shards
    if num_shards is None:
        num_shards = -(-samples // (plan.run.samples_per_shard or DEFAULT_SAMPLES_PER_SHARD))
    elif num_shards > samples:
        raise UsageError(
            f"--num_shards {num_shards}: only {samples} samples were made; use at most "
            f"{samples} shards, or --samples_per_shard"
        )
    interrupt.check()
    log.info("shuffle: %d samples into %d shard(s)", samples, num_shards)
    labels = _shard_labels(samples, num_shards, work_dir, plan.cfg.seed)
    if sum(count for _, count in spool) != samples:
        raise RuntimeError(f"the spool holds {sum(count for _, count in spool)} samples, expected {samples}")
    jobs = [
        (
            list(spool),
            str(labels),
            str(staging / SHARD_NAME.format(prefix=plan.run.output_prefix, index=k)),
            k,
        )
        for k in range(num_shards)
    ]
    log.info("write: %d shard(s)", num_shards)
    entries = []
    bar = tqdm(total=num_shards, desc="write shards", unit="shard", disable=_disabled(progress))
    with bar:
        for entry in parallel_map(_write_shard, jobs):
            interrupt.check()
            entries.append(entry)
            bar.update()
    shutil.rmtree(work_dir, ignore_errors=True)
    manifest = Manifest(
        shards=tuple(sorted(entries, key=lambda e: e.name)),
        seq_len=plan.cfg.max_seq_len,
        max_pred_len=plan.cfg.max_pred_len,
        seed=plan.cfg.seed,
        settings=plan.settings,
    )
    write_manifest(staging, manifest)
    return manifest


def open_output(output_dir: str | os.PathLike[str], overwrite: bool) -> Path:
    """``shard_format.open_staging`` with its errors as ``UsageError``."""
    try:
        return open_staging(output_dir, overwrite)
    except ShardSetError as err:
        raise UsageError(str(err)) from None


def publish_set(staging: Path, output_dir: str | os.PathLike[str]) -> None:
    log.info("publish: %s", output_dir)
    try:
        publish(staging, output_dir)
    except OSError as err:
        raise UsageError(f"--output_dir {output_dir}: cannot publish the set ({err.strerror})") from None


def _check_run_args(
    num_workers: int,
    num_shards: int | None,
    samples_per_shard: int | None,
    output_prefix: str,
    chunk_bytes: int,
) -> None:
    if num_workers < 1:
        raise UsageError(f"--num_workers {num_workers}: must be at least 1")
    if num_shards is not None and samples_per_shard is not None:
        raise UsageError("--num_shards and --samples_per_shard: give one of them, not both")
    if num_shards is not None and num_shards < 1:
        raise UsageError(f"--num_shards {num_shards}: must be at least 1")
    if samples_per_shard is not None and samples_per_shard < 1:
        raise UsageError(f"--samples_per_shard {samples_per_shard}: must be at least 1")
    if not output_prefix or "/" in output_prefix or os.sep in output_prefix:
        raise UsageError(
            f"--output_prefix {output_prefix!r}: must be a non-empty file-name prefix without '/'"
        )
    if chunk_bytes < 1:
        raise UsageError(
            f"--chunk_mb: the chunk size ({chunk_bytes} bytes) must be at least 1 byte; "
            f"the default is {DEFAULT_CHUNK_MB:g} MiB"
        )


class _WorkerMap:
    """Context manager yielding an ordered ``map(fn, items)``: a pool of ``workers`` worker
    processes, or this process itself when ``workers == 1``.

    concurrent.futures rather than multiprocessing.Pool: a worker that dies (killed for
    memory, say) fails the run with BrokenProcessPool instead of hanging it. At most
    ``2 x workers`` items are in flight, so finished results waiting behind a slow one stay few.
    """

    def __init__(
        self, workers: int, vocab_path: str, cfg: PrepConfig, encoding: str = "utf-8", errors: str = "strict"
    ) -> None:
        self.workers, self.init_args = workers, (vocab_path, cfg, workers > 1, encoding, errors)
        self.pool: ProcessPoolExecutor | None = None

    def _ordered(self, fn: Callable, items: Iterable) -> Iterator:
        assert self.pool is not None
        pending: deque[Future] = deque()
        for item in items:
            pending.append(self.pool.submit(fn, item))
            if len(pending) >= 2 * self.workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()

    def __enter__(self) -> Callable[[Callable, Iterable], Iterator]:
        vocab_path, cfg, _, encoding, errors = self.init_args
        if self.workers == 1:
            _init_worker(vocab_path, cfg, False, encoding, errors)
            return map
        # fork where there is one (Linux): workers inherit the imports and the loaded vocab and
        # tokenizers instead of making them again (flash-tokenizer's ~150 MB of tables, shared
        # copy-on-write: each worker building its own cost 2 workers 18% more CPU, not 6%). This
        # process has used no tokenizer and started no thread yet, and the first task below
        # makes the workers at once, before the progress bars start theirs. spawn elsewhere.
        if "fork" in mp.get_all_start_methods():
            _init_worker(vocab_path, cfg, False, encoding, errors)
            context, initializer, initargs = mp.get_context("fork"), _init_forked_worker, ()
        else:
            context, initializer, initargs = mp.get_context("spawn"), _init_worker, self.init_args
        self.pool = ProcessPoolExecutor(
            self.workers, mp_context=context, initializer=initializer, initargs=initargs
        )
        # A stop signal raised inside the fork hooks (logging's) would be swallowed: hold it
        # until the workers exist, then stop with them shut down.
        with interrupt.deferred_signals():
            self.pool.submit(int).result()
        if interrupt.received() is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            interrupt.check()
        return self._ordered

    def __exit__(self, exc_type, *_) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=exc_type is not None)


WorkerMap = _WorkerMap  # shared with training.prepare_indexed


@dataclass
class _Totals:
    records: int = 0
    tokens: int = 0
    unknown: int = 0
    bytes: int = 0


def _build_all(
    parallel_map: Callable[[Callable, Iterable], Iterator],
    chunks: list[Chunk],
    work_dir: Path,
    total_bytes: int,
    pool_tokens: int,
    cfg: PrepConfig,
    progress: bool | None,
) -> tuple[_Totals, list[tuple[str, int]]]:
    """Tokenize every unit, gather the random-next pool, then make every unit's samples.

    Returns the totals and the spool: each unit's record file with its record count, in order."""
    totals = _Totals()
    folders = [str(work_dir / f"unit-{k}") for k in range(len(chunks))]
    bar = tqdm(total=total_bytes, desc="tokenize", unit="B", unit_scale=True, disable=_disabled(progress))
    documents = []
    with bar:
        for result in parallel_map(_tokenize_chunk, zip(chunks, folders, strict=True)):
            interrupt.check()
            documents.append(result.documents)
            totals.tokens += result.tokens
            totals.unknown += result.unknown
            totals.bytes += result.bytes
            bar.update(result.bytes)
    pool_folder = work_dir / "pool"
    first_document = build_pool(folders, documents, totals.tokens, pool_tokens, cfg.seed, pool_folder)
    jobs = [(k, folders[k], int(first_document[k]), str(pool_folder)) for k in range(len(chunks))]
    bar = tqdm(total=len(jobs), desc="pairs+masks", unit="unit", disable=_disabled(progress))
    spool = []
    with bar:
        for (_, folder, _, _), count in zip(jobs, parallel_map(_build_unit, jobs), strict=True):
            interrupt.check()
            spool.append((str(Path(folder) / "records.bin"), count))
            totals.records += count
            bar.update()
            bar.set_postfix(samples=totals.records, refresh=False)
    return totals, spool


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


def _shard_labels(samples: int, num_shards: int, work_dir: Path, seed: int) -> Path:
    """A balanced, randomly drawn shard number per spooled sample, saved for the shard writers."""
    sizes = np.full(num_shards, samples // num_shards, dtype=np.int64)
    sizes[: samples % num_shards] += 1
    label_type = np.uint16 if num_shards <= 1 << 16 else np.uint32
    labels = np.repeat(np.arange(num_shards, dtype=label_type), sizes)
    _, np_rng = rngs(seed, ROUTE)
    np_rng.shuffle(labels)
    path = work_dir / "shard-labels.npy"
    np.save(path, labels)
    return path


def _disabled(progress: bool | None) -> bool | None:
    # tqdm: disable=None means "only on a terminal".
    return None if progress is None else not progress


# ---------------------------------------------------------------------------------------------
# Command line


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(
        prog="python -m training.prepare_data",
        description="Make BERT pretraining HDF5 shards (MLM + NSP) from a text corpus "
        "(one sentence per line, blank line between documents) and a WordPiece vocab.txt.",
    )
    parser.add_argument("--input", nargs="+", required=True, help="corpus file(s) or directories")
    parser.add_argument("--vocab", required=True, help="WordPiece vocab.txt (see python -m training.vocab)")
    parser.add_argument("--output_dir", required=True, help="directory for <prefix>_training_<k>.hdf5")
    parser.add_argument("--output_prefix", default="corpus", help="shard name prefix (default: corpus)")
    parser.add_argument("--max_seq_len", type=int, default=128, help="tokens per sample (default: 128)")
    parser.add_argument(
        "--max_pred_len", type=int, default=20, help="most masked tokens per sample (default: 20)"
    )
    parser.add_argument(
        "--masked_lm_prob", type=float, default=0.15, help="share of tokens masked (default: 0.15)"
    )
    parser.add_argument(
        "--short_seq_prob", type=float, default=0.1, help="share of short targets (default: 0.1)"
    )
    parser.add_argument("--dupe_factor", type=int, default=5, help="passes with different masks (default: 5)")
    parser.add_argument("--seed", type=int, default=12345, help="random seed (default: 12345)")
    parser.add_argument("--whole_word_mask", action="store_true", help="mask whole words, not single pieces")
    parser.add_argument(
        "--target_per_sample",
        action="store_true",
        help="draw the short target length per sample (this tool's earlier behaviour), not once per "
        "document as the reference does",
    )
    parser.add_argument(
        "--pool_tokens",
        type=int,
        default=DEFAULT_POOL_TOKENS,
        help="most tokens of the pool random next segments come from: the whole corpus up to it, a "
        f"uniform sample of documents above; changes the output (default: {DEFAULT_POOL_TOKENS})",
    )
    parser.add_argument(
        "--do_lower_case",
        dest="lower_case",
        action="store_true",
        default=True,
        help="lower-case and strip accents (default; for uncased vocabs)",
    )
    parser.add_argument(
        "--no_lower_case", dest="lower_case", action="store_false", help="keep case (cased vocabs)"
    )
    parser.add_argument(
        "--num_workers",
        type=int,
        default=len(os.sched_getaffinity(0)),
        help="worker processes (default: all CPUs); the output does not depend on it",
    )
    shards = parser.add_mutually_exclusive_group()
    shards.add_argument("--num_shards", type=int, help="number of output shards")
    shards.add_argument(
        "--samples_per_shard", type=int, help=f"most samples per shard (default: {DEFAULT_SAMPLES_PER_SHARD})"
    )
    parser.add_argument(
        "--chunk_mb",
        type=float,
        default=DEFAULT_CHUNK_MB,
        help=f"input chunk size in MiB, the unit of parallel work and of random seeding; "
        f"changes the output (default: {DEFAULT_CHUNK_MB:g})",
    )
    parser.add_argument(
        "--encoding",
        default="utf-8",
        help="of the corpus files, ASCII-compatible (default: utf-8; e.g. latin-1)",
    )
    parser.add_argument(
        "--errors",
        choices=ERROR_MODES,
        default="strict",
        help="invalid bytes: strict = an error naming file, line and offset (default); replace = U+FFFD",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace the shard set in --output_dir")
    parser.add_argument("--no_progress", action="store_true", help="no progress bars")
    return parser


class PhaseLog(logging.StreamHandler):
    """Phase lines on stdout. logging reports and swallows errors raised while a record is
    written; a stop signal arriving then must still stop the tool."""

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 (logging's name)
        if isinstance(sys.exc_info()[1], interrupt.Interrupted):
            raise
        super().handleError(record)


def prep_config(args: argparse.Namespace) -> PrepConfig:
    """The sample settings of a parsed command line (this tool's or ``prepare_indexed``'s)."""
    return PrepConfig(
        max_seq_len=args.max_seq_len,
        max_pred_len=args.max_pred_len,
        masked_lm_prob=args.masked_lm_prob,
        short_seq_prob=args.short_seq_prob,
        dupe_factor=args.dupe_factor,
        seed=args.seed,
        lower_case=args.lower_case,
        whole_word_mask=args.whole_word_mask,
        target_per_sample=args.target_per_sample,
    )


def run_settings(args: argparse.Namespace) -> RunSettings:
    """The run settings (shards, work units, input decoding) of a parsed command line."""
    return RunSettings(
        num_shards=args.num_shards,
        samples_per_shard=args.samples_per_shard,
        output_prefix=args.output_prefix,
        chunk_bytes=int(args.chunk_mb * (1 << 20)),
        pool_tokens=args.pool_tokens,
        encoding=args.encoding,
        errors=args.errors,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    cfg = prep_config(args)
    log.addHandler(PhaseLog(sys.stdout))
    log.setLevel(logging.INFO)
    try:
        with interrupt.stop_on_signals():
            summary = prepare_shards(
                args.input,
                args.vocab,
                args.output_dir,
                cfg,
                num_workers=args.num_workers,
                num_shards=args.num_shards,
                samples_per_shard=args.samples_per_shard,
                output_prefix=args.output_prefix,
                chunk_bytes=int(args.chunk_mb * (1 << 20)),
                overwrite=args.overwrite,
                progress=False if args.no_progress else None,
                pool_tokens=args.pool_tokens,
                encoding=args.encoding,
                errors=args.errors,
            )
    except UsageError as err:
        parser.error(str(err))
    except (interrupt.Interrupted, BrokenProcessPool):
        # A worker killed by the same signal can break the pool before the parent's handler runs.
        if interrupt.received() is None:
            raise
        stopped = interrupt.Interrupted(interrupt.received())
        print(
            f"{parser.prog}: {stopped}: stopped; nothing published, {args.output_dir} unchanged",
            file=sys.stderr,
        )
        return stopped.exit_code
    if interrupt.received() is not None:  # arrived while publishing: the complete set is in place
        stopped = interrupt.Interrupted(interrupt.received())
        print(f"{parser.prog}: {stopped} after the set was published", file=sys.stderr)
        return stopped.exit_code
    unknown_share = summary.unknown_tokens / max(1, summary.tokens)
    print(
        f"wrote {summary.samples} samples to {len(summary.shards)} shard(s) in {args.output_dir} "
        f"from {summary.input_bytes / 1e6:.1f} MB ({summary.tokens} tokens, {unknown_share:.2%} [UNK]) "
        f"in {summary.seconds:.1f} s"
    )
    if unknown_share > 0.01:
        print(
            f"warning: {unknown_share:.1%} of tokens are [UNK]; check that --do_lower_case/--no_lower_case "
            "matches how the vocab was built",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
