"""The data-preparation pipeline: plan, worker processes, spool, shards, publish.

``prepare_shards`` is what ``python -m training.dataprep.prepare_data`` runs (its command line is in that
module; the sample algorithm in ``training.dataprep.bert_samples``; the units' work in
``training.dataprep.prep_units``; shard writing in ``training.dataprep.shard_writer``).

Pipeline, and why its output does not depend on --num_workers:
1. Plan: every input file is cut into units of about --chunk_mb ending at a blank line; a unit
   is fixed by the data alone, and numbered in corpus order.
2. Tokenize, in parallel over units (BERT WordPiece, ``training.dataprep.vocab.WordPieceEncoder``); each
   unit's token arrays go to the work folder.
3. Pool: the documents "random next" segments are drawn from: the whole corpus up to
   --pool_tokens tokens, else each document kept with the same seeded probability. Written
   once, memory-mapped by every worker.
4. Samples, in parallel over units: ``training.dataprep.bert_samples.unit_samples`` with RNGs seeded from
   (seed, unit number, pass). Each unit's records go to a spool file of its own, compactly
   (uint16 ids where the vocab allows); together, in unit order, they are the spool.
5. Shuffle, memory-bounded: a seeded random permutation of balanced shard labels (one 2-4 byte
   label per sample) assigns each sample to a shard; each shard's writer gathers its samples
   from the spool and permutes them in memory with its own seed. A uniformly random balanced split
   followed by a uniform order inside each part is a uniform shuffle of the whole set.
6. Write, in parallel over shards: HDF5 with the shuffle and gzip filters (chunks deflated with
   zlib-ng), made one chunk of rows at a time at the final dtypes; then the manifest (sample
   counts, SHA-256), and publish.
``training.dataprep.prepare_indexed`` runs steps 2 and 4 on the pods of a Kubernetes Indexed Job with
these same functions, and 3, 5 and 6 on one of them, for the same bytes.
"""

from __future__ import annotations

import gc
import logging
import multiprocessing as mp
import os
import shutil
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from trainium_job.paths import SHARD_NAME

from . import interrupt
from .bert_samples import record_dtype
from .prep_settings import (
    DEFAULT_CHUNK_MB,
    DEFAULT_POOL_TOKENS,
    DEFAULT_SAMPLES_PER_SHARD,
    PrepConfig,
    RunSettings,
    check_settings,
)
from .prep_units import (
    Chunk,
    build_pool,
    init_forked_worker,
    init_worker,
    plan_chunks,
    tokenize_unit,
    unit_records,
    write_shard,
)
from .shard_format import (
    Manifest,
    ShardSetError,
    discard,
    open_staging,
    publish,
    sha256_of,
    write_manifest,
)
from .shard_writer import shard_labels
from .text_input import (
    DEFAULT_INPUT_PATTERN,
    UsageError,
    check_text_files,
    corpus_has_text,
    expand_inputs,
)
from .vocab import load_vocab

log = logging.getLogger("training.dataprep.prepare_data")
#: The tool's name in a manifest's settings: part of what a published set is compared by
#: (``prepare_indexed._published``), so it stays the name sets were first written under, whatever
#: the module is called now: a set on FSx is never re-made for a rename.
MANIFEST_TOOL = "training.prepare_data"


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
    input_pattern: str = DEFAULT_INPUT_PATTERN,
) -> PrepSummary:
    """Make pretraining shards from a corpus; see the module docstring.

    Args:
        inputs: corpus files or directories (see ``training.dataprep.text_input.expand_inputs`` for the order).
        vocab_path: vocab.txt with the BERT special tokens, [PAD] on the first line.
        output_dir: the shard set's directory: ``<output_prefix>_training_<k>.hdf5`` and
            ``manifest.json``, published together once complete (see ``training.dataprep.shard_format``).
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
        input_pattern: the files of a directory in ``inputs`` that are read (a file named
            directly is always read).

    Raises:
        UsageError: a bad argument or input, with a message naming it and the fix.
        training.dataprep.interrupt.Interrupted: a stop signal (inside ``interrupt.stop_on_signals``);
            nothing is published then.
    """
    started = time.monotonic()
    run = RunSettings(
        num_shards,
        samples_per_shard,
        output_prefix,
        chunk_bytes,
        pool_tokens,
        encoding,
        errors,
        input_pattern,
    )
    plan = plan_run(inputs, vocab_path, output_dir, cfg, run, num_workers)
    staging = open_output(output_dir, overwrite)
    try:
        totals, manifest = _make_set(plan, staging, vocab_path, cfg, run, num_workers, progress)
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


def _make_set(
    plan: RunPlan,
    staging: Path,
    vocab_path: str | os.PathLike[str],
    cfg: PrepConfig,
    run: RunSettings,
    num_workers: int,
    progress: bool | None,
) -> tuple[_Totals, Manifest]:
    """Write ``plan``'s shard set into ``staging`` (unpublished); its totals and manifest."""
    work_dir = staging / ".work"
    work_dir.mkdir()
    workers = min(num_workers, len(plan.chunks))
    log.info(
        "tokenize+mask: %d unit(s) of %d file(s), %d worker(s)",
        len(plan.chunks),
        len(plan.files),
        workers,
    )
    with _WorkerMap(workers, str(vocab_path), cfg, run.encoding, run.errors) as parallel_map:
        totals, spool = _build_all(
            parallel_map, plan.chunks, work_dir, plan.input_bytes, run.pool_tokens, cfg, progress
        )
        manifest = finish_set(parallel_map, spool, totals.records, plan, staging, work_dir, progress)
    return totals, manifest


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
    check_settings(cfg, run, num_workers)
    files = expand_inputs(inputs, run.input_pattern)
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
        "tool": MANIFEST_TOOL,
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
    labels = shard_labels(samples, num_shards, work_dir, plan.cfg.seed)
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
    bar = _bar(progress, total=num_shards, desc="write shards", unit="shard")
    with bar:
        for entry in parallel_map(write_shard, jobs):
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
        # A stop signal raised inside an import or a C extension's callback can come out as
        # another error (an ImportError) or be swallowed with a traceback on stderr: set-up and
        # each in-process work item run with signals deferred, and stop right after them.
        fork = "fork" in mp.get_all_start_methods()
        if self.workers == 1 or fork:
            with interrupt.deferred_signals():
                init_worker(vocab_path, cfg, False, encoding, errors)
            interrupt.check()
        if self.workers == 1:
            return _in_process
        # fork where there is one (Linux): workers inherit the imports and the loaded vocab and
        # tokenizers instead of making them again (flash-tokenizer's ~200 MB of tables, shared
        # copy-on-write: built in each worker they start 0.1 s sooner on 2 cores, but cost one
        # private copy per worker; BENCHMARKS.md "Two workers by corpus size"). This
        # process has used no tokenizer and started no thread yet, and the first task below
        # makes the workers at once, before the progress bars start theirs. spawn elsewhere.
        if fork:
            # Objects made so far go to the collector's permanent generation: a worker's
            # collections then never touch them, so their pages stay shared (no copy-on-write).
            gc.freeze()
            self.pool = ProcessPoolExecutor(
                self.workers, mp_context=mp.get_context("fork"), initializer=init_forked_worker
            )
        else:
            self.pool = ProcessPoolExecutor(
                self.workers,
                mp_context=mp.get_context("spawn"),
                initializer=init_worker,
                initargs=self.init_args,
            )
        # A stop signal raised inside the fork hooks (logging's) would be swallowed: hold it
        # until the workers exist, then stop with them shut down.
        with interrupt.deferred_signals():
            self.pool.submit(int).result()
        if interrupt.received() is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            interrupt.check()
        return self._ordered

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=exc_type is not None)
            gc.unfreeze()  # this process may go on (a caller's loop, the tests): collect them again


WorkerMap = _WorkerMap  # shared with training.dataprep.prepare_indexed


def _in_process(fn: Callable, items: Iterable) -> Iterator:
    """``map`` in this process, a stop signal acted on between items (see ``_WorkerMap``)."""
    for item in items:
        with interrupt.deferred_signals():
            result = fn(item)
        interrupt.check()
        yield result


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
    bar = _bar(progress, total=total_bytes, desc="tokenize", unit="B", unit_scale=True)
    documents = []
    with bar:
        for result in parallel_map(tokenize_unit, zip(chunks, folders, strict=True)):
            interrupt.check()
            documents.append(result.documents)
            totals.tokens += result.tokens
            totals.unknown += result.unknown
            totals.bytes += result.bytes
            bar.update(result.bytes)
    pool_folder = work_dir / "pool"
    first_document = build_pool(folders, documents, totals.tokens, pool_tokens, cfg.seed, pool_folder)
    jobs = [(k, folders[k], int(first_document[k]), str(pool_folder)) for k in range(len(chunks))]
    bar = _bar(progress, total=len(jobs), desc="pairs+masks", unit="unit")
    spool = []
    with bar:
        for (_, folder, _, _), count in zip(jobs, parallel_map(unit_records, jobs), strict=True):
            interrupt.check()
            spool.append((str(Path(folder) / "records.bin"), count))
            totals.records += count
            bar.update()
            bar.set_postfix(samples=totals.records, refresh=False)
    return totals, spool


class _NoBar:
    """What a progress bar is asked to do, doing nothing."""

    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *_: object) -> None:
        pass

    def update(self, n: float = 1) -> None:
        pass

    def set_postfix(self, **_: object) -> None:
        pass


def _bar(progress: bool | None, **kwargs: Any) -> Any:
    """A tqdm bar; None shows it only on a terminal. Without bars, tqdm is not imported: its
    import is serial start-up time before the workers fork."""
    if progress is False:
        return _NoBar()
    from tqdm import tqdm

    return tqdm(disable=None if progress is None else not progress, **kwargs)
