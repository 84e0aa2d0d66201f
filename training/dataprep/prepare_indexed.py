"""``prepare_data`` spread over the pods of a Kubernetes Indexed Job; the same shard set, bit for bit.

    python -m training.dataprep.prepare_indexed --completions W [--index I] --work_dir SHARED_DIR \\
        [--marker FILE] <every python -m training.dataprep.prepare_data flag>

Every pod runs this with the same flags; ``--index`` defaults to ``$JOB_COMPLETION_INDEX``, which
Kubernetes sets in the pods of an Indexed Job. ``--work_dir`` and ``--output_dir`` must be on a
file system all pods share (FSx for Lustre), and all W pods must run at the same time
(parallelism = completions): they wait for each other twice.

1. Every pod plans the run (``prep_pipeline.plan_run``: the same units everywhere) and tokenizes
   units ``I, I+W, I+2W, ...`` with ``prep_units.tokenize_unit``.
2. Wait for all units; pod 0 gathers the random-next pool (``prep_units.build_pool``), the
   others wait for it.
3. Every pod makes the samples of its units with ``prep_units.unit_records`` (each unit's
   record file, as on one machine). Pods other than 0 are done.
4. Pod 0 waits for every unit's records, then shuffles and writes the shards, the manifest, and
   publishes them (``prep_pipeline.finish_set``: the record files are read in unit order, as the
   single-machine tool reads them), writes ``--marker`` and deletes the work folder.

These are the single-machine tool's own functions on the same units with the same seeds, so the
pod count and ``--num_workers`` (processes per pod) cannot change the output. A restarted pod
skips the units whose results are already in the work folder. A pod that hits a usage error
(invalid bytes, say) records it there, and the others stop instead of waiting.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from trainium_job.paths import MANIFEST_NAME

from . import interrupt
from .prep_pipeline import (
    RunPlan,
    WorkerMap,
    finish_set,
    log,
    open_output,
    plan_run,
    publish_set,
)
from .prep_units import build_pool, tokenize_unit, unit_records
from .prepare_data import PhaseLog, build_parser, prep_config, run_settings
from .shard_format import ManifestError, discard, read_manifest
from .text_input import UsageError

DEFAULT_POLL_SECONDS = 10.0
DEFAULT_BARRIER_TIMEOUT = 24 * 3600.0  # a long tokenization on a slow file system still fits


class WorkFolder:
    """The shared work folder: unit results, the pool, and the pods' error reports."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def unit(self, k: int) -> Path:
        return self.root / f"unit-{k}"

    def tokenized(self, k: int) -> Path:
        return self.root / f"unit-{k}.json"

    def records(self, k: int) -> Path:
        return self.unit(k) / "records.bin"  # where prep_units.unit_records writes them

    def spooled(self, k: int) -> Path:
        return self.root / f"samples-{k}.json"

    @property
    def pool(self) -> Path:
        return self.root / "pool"

    def failure(self, index: int) -> Path:
        return self.root / f"failed-{index}.txt"


def _write_atomically(path: Path, text: str) -> None:
    partial = path.with_name(f".{path.name}.{uuid.uuid4().hex}.partial")
    partial.write_text(text, encoding="utf-8")
    partial.replace(path)


def _check_settings(work: WorkFolder, settings: dict, completions: int) -> None:
    """The first pod records the run's settings; a pod with other ones (a changed spec reusing
    the folder) is refused instead of mixing two runs."""
    body = json.dumps({"completions": completions, "settings": settings}, sort_keys=True)
    path = work.root / "settings.json"
    partial = path.with_name(f".settings.{uuid.uuid4().hex}.partial")  # pods all have pid 1
    partial.write_text(body, encoding="utf-8")
    try:
        os.link(partial, path)  # create-if-absent with its whole content: readers never see it half written
    except FileExistsError:
        pass
    finally:
        partial.unlink()
    if path.read_text(encoding="utf-8") != body:
        raise UsageError(
            f"--work_dir {work.root}: holds the work of a run with other settings or pod count; "
            "delete it, or give this run its own --work_dir"
        )


def _wait_for(paths: Sequence[Path], what: str, work: WorkFolder, poll: float, timeout: float) -> None:
    """Wait until every path exists, or another pod reports a failure, or ``timeout``."""
    started = time.monotonic()
    pending = list(paths)
    while True:
        pending = [p for p in pending if not p.exists()]
        if not pending:
            return
        failed = sorted(work.root.glob("failed-*.txt"))
        if failed:
            raise UsageError(
                f"stopped: {failed[0].stem} reported: {failed[0].read_text(encoding='utf-8').strip()}"
            )
        if time.monotonic() - started > timeout:
            raise UsageError(
                f"waited {timeout:.0f} s for {len(pending)} {what} (e.g. {pending[0].name}) from the other "
                "pods; all pods must run at once: set the Job's parallelism to its completions"
            )
        time.sleep(poll)


def run_index(
    plan: RunPlan,
    vocab_path: str,
    output_dir: Path,
    work: WorkFolder,
    *,
    index: int,
    completions: int,
    num_workers: int,
    overwrite: bool = False,
    marker: Path | None = None,
    poll: float = DEFAULT_POLL_SECONDS,
    timeout: float = DEFAULT_BARRIER_TIMEOUT,
) -> str:
    """This pod's part of the run (see the module docstring); returns what it did, in words."""
    cfg, run = plan.cfg, plan.run
    units = range(len(plan.chunks))
    mine = [k for k in units if k % completions == index]
    workers = max(1, min(num_workers, len(mine)))
    with WorkerMap(workers, vocab_path, cfg, run.encoding, run.errors) as parallel_map:
        todo = [k for k in mine if not work.tokenized(k).exists()]
        log.info("tokenize: %d of %d unit(s) on pod %d of %d", len(todo), len(units), index, completions)
        for k, result in zip(
            todo,
            parallel_map(tokenize_unit, [(plan.chunks[k], str(work.unit(k))) for k in todo]),
            strict=False,
        ):
            interrupt.check()
            _write_atomically(work.tokenized(k), json.dumps(result.__dict__))
        _wait_for([work.tokenized(k) for k in units], "tokenized unit(s)", work, poll, timeout)
        results = [json.loads(work.tokenized(k).read_text(encoding="utf-8")) for k in units]
        documents = [r["documents"] for r in results]
        first_document = np.concatenate(([0], np.cumsum(documents))).astype(np.int64)
        if index == 0 and not work.pool.exists():
            log.info("pool: from %d unit(s)", len(units))
            partial = work.root / f".pool.{os.getpid()}.partial"
            shutil.rmtree(partial, ignore_errors=True)
            tokens = sum(r["tokens"] for r in results)
            build_pool(
                [str(work.unit(k)) for k in units], documents, tokens, run.pool_tokens, cfg.seed, partial
            )
            partial.replace(work.pool)
        _wait_for([work.pool], "random-next pool", work, poll, timeout)
        todo = [k for k in mine if not work.spooled(k).exists()]
        log.info("samples: %d unit(s)", len(todo))
        jobs = [(k, str(work.unit(k)), int(first_document[k]), str(work.pool)) for k in todo]
        for k, count in zip(todo, parallel_map(unit_records, jobs), strict=True):
            interrupt.check()
            _write_atomically(work.spooled(k), json.dumps({"records": count}))
        if index != 0:
            return f"pod {index}: {len(mine)} unit(s) done"
        _wait_for([work.spooled(k) for k in units], "unit record file(s)", work, poll, timeout)
        counts = [json.loads(work.spooled(k).read_text(encoding="utf-8"))["records"] for k in units]
        staging = open_output(output_dir, overwrite)
        try:
            work_dir = staging / ".work"
            work_dir.mkdir()
            spool = [(str(work.records(k)), counts[k]) for k in units]
            manifest = finish_set(parallel_map, spool, sum(counts), plan, staging, work_dir, progress=False)
            publish_set(staging, output_dir)
        finally:
            discard(staging)
    if marker is not None:
        _write_atomically(marker, f"{len(manifest.shards)} shards\n")
    shutil.rmtree(work.root, ignore_errors=True)
    return f"pod 0: published {manifest.samples} samples in {len(manifest.shards)} shard(s) to {output_dir}"


def _parser():
    parser = build_parser()
    parser.prog = "python -m training.dataprep.prepare_indexed"
    parser.description = "prepare_data on the pods of a Kubernetes Indexed Job (same output, bit for bit)."
    parser.add_argument("--completions", type=int, required=True, help="pods of the Indexed Job")
    parser.add_argument(
        "--index",
        type=int,
        default=None,
        help="this pod's index (default: $JOB_COMPLETION_INDEX, set by Kubernetes)",
    )
    parser.add_argument("--work_dir", required=True, help="shared folder for intermediate results")
    parser.add_argument("--marker", default=None, help="file written by pod 0 once the set is published")
    parser.add_argument(
        "--poll_seconds",
        type=float,
        default=DEFAULT_POLL_SECONDS,
        help="how often a waiting pod looks (default: 10)",
    )
    parser.add_argument(
        "--barrier_timeout",
        type=float,
        default=DEFAULT_BARRIER_TIMEOUT,
        help="seconds a pod waits for the others before failing (default: one day)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    index = args.index if args.index is not None else os.environ.get("JOB_COMPLETION_INDEX")
    if index is None or not str(index).isdigit() or not 0 <= int(index) < args.completions:
        parser.error(
            f"--index {index}: give 0 to --completions - 1, or run in an Indexed Job ($JOB_COMPLETION_INDEX)"
        )
    index = int(str(index))
    output_dir = Path(args.output_dir)
    marker = Path(args.marker) if args.marker else None
    if marker is not None and marker.exists():
        print(f"{output_dir}: already prepared ({marker} exists)")
        return 0
    cfg = prep_config(args)
    run = run_settings(args)
    log.addHandler(PhaseLog(sys.stdout))
    log.setLevel("INFO")
    work = WorkFolder(Path(args.work_dir))
    try:
        with interrupt.stop_on_signals():
            plan = plan_run(args.input, args.vocab, output_dir, cfg, run, args.num_workers)
            if index == 0 and marker is not None and _published(output_dir, plan):
                # Pod 0 published, then stopped before the marker: finish its job.
                _write_atomically(marker, "published\n")
                shutil.rmtree(work.root, ignore_errors=True)
                print(f"{output_dir}: already published; marker written")
                return 0
            work.root.mkdir(parents=True, exist_ok=True)
            _check_settings(work, plan.settings, args.completions)
            try:
                done = run_index(
                    plan,
                    args.vocab,
                    output_dir,
                    work,
                    index=index,
                    completions=args.completions,
                    num_workers=args.num_workers,
                    overwrite=args.overwrite,
                    marker=marker,
                    poll=args.poll_seconds,
                    timeout=args.barrier_timeout,
                )
            except UsageError as err:
                if not str(err).startswith("stopped: "):  # the others learn of it from the folder
                    _write_atomically(work.failure(index), str(err))
                raise
    except UsageError as err:
        parser.error(str(err))
    except interrupt.Interrupted as stopped:
        print(f"{parser.prog}: {stopped}: pod {index} stopped; nothing published", file=sys.stderr)
        return stopped.exit_code
    print(done)
    return 0


def _published(output_dir: Path, plan: RunPlan) -> bool:
    """Does ``output_dir`` hold the set this run makes (same seed and settings)?"""
    if not (output_dir / MANIFEST_NAME).is_file():
        return False
    try:
        manifest = read_manifest(output_dir)
    except ManifestError:
        return False
    return manifest.seed == plan.cfg.seed and manifest.settings == plan.settings


if __name__ == "__main__":
    sys.exit(main())
