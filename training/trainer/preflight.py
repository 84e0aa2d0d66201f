"""Pre-flight: everything that can fail on the inputs fails before the first step.

Run by every rank before the device runtime, the process group or the model exist, so a bad
input costs seconds, not a compiled graph and 64 NeuronCores idling until step 200:

* every shard is opened and its datasets' names, dtypes and shapes checked from the HDF5
  header (no data read; rank r checks shards r, r+W, ... so each is opened once per job);
* the output, checkpoint and TensorBoard directories and the metrics/log files' directories
  are created if needed and proven writable (a file is created and removed);
* the checkpoint to resume from is verified against its digests (older ones are tried when it
  fails, see ``training.trainer.checkpoint.first_verified``), and the run's flags are compared with
  the ones it recorded (``training.trainer.resume``);
* the held-out set (``--eval_dir``) is checked as the shards are, holds ``--eval_samples``,
  shares no shard with ``--data_dir`` and, where both manifests record it, their vocabulary; a set
  not there yet (its staging Job still making it) is no error: the run evaluates once it is there
  (``training.trainer.pretrain.arrived_held_out``), so a pod never waits for it;
* with nothing to resume, ``--init_from``'s checkpoint is verified and refused if it is of
  another model or vocabulary (``training.trainer.init_from.check_start``).

Errors are one line naming the file or flag, the value and the fix (``PreflightError``,
``CheckpointError``, ``ResumeError``, ``InitFromError``); ``python -m training.trainer.pretrain`` prints them without a
traceback unless ``--debug``.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..dataprep.shard_format import ShardSetError, read_manifest
from . import checkpoint as ckpt
from .cli import PretrainArgs
from .data import ShardFormatError, check_shard, list_shards
from .init_from import StartPoint, check_start, shards_vocab
from .resume import check_flags
from .train_state import recorded_run

log = logging.getLogger(__name__)


class PreflightError(RuntimeError):
    """An input that would fail the run later; the message is one line naming it."""


@dataclass
class Ready:
    """What pre-flight found: the shards and the checkpoints to resume from (first verified), or
    with none, the verified ``--init_from`` checkpoint to take the weights of."""

    files: list[str]
    candidates: list[Path] = field(default_factory=list)
    meta: dict[str, Any] | None = None
    applied: list[str] = field(default_factory=list)
    start: StartPoint | None = None
    #: The SHA-256 of the shards' vocab.txt (their manifest's), None where not recorded.
    vocab_sha256: str | None = None
    #: The held-out shards (``--eval_dir``), sorted; empty without one.
    eval_files: list[str] = field(default_factory=list)
    #: ``--eval_dir`` when it is not there yet (looked for again at each evaluation), else None.
    eval_pending: str | None = None


def check_writable(path: Path, flag: str) -> None:
    """Create ``path`` if needed and prove a file can be created in it."""
    probe = path / f".write-test-{socket.gethostname()}-{os.getpid()}"
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise PreflightError(
            f"{flag} {path}: not writable ({e.strerror or e}); choose a writable directory or fix its permissions"
        ) from None


def list_checked(data_dir: str) -> list[str]:
    """The sorted shard list, or a PreflightError naming ``--data_dir`` (no set, no manifest)."""
    try:
        return list_shards(data_dir)
    except FileNotFoundError as e:  # its message names --data_dir already
        raise PreflightError(str(e)) from None
    except ShardSetError as e:
        raise PreflightError(f"--data_dir {e}") from None


def check_shards(files: list[str], seq_len: int, max_pred_len: int, rank: int, world_size: int) -> None:
    """Check this rank's share of ``files`` from their headers."""
    for path in files[rank::world_size]:
        try:
            check_shard(path, seq_len, max_pred_len)
        except ShardFormatError as e:
            raise PreflightError(f"{e} (--seq_len {seq_len}, --max_pred_len {max_pred_len})") from None


def held_out(args: PretrainArgs, files: list[str], rank: int, world_size: int) -> list[str] | None:
    """The ``--eval_dir`` shards, checked: their format, enough samples, none trained on, the
    shards' vocabulary. None when ``--eval_dir`` is not there (yet); empty without one."""
    ev, data = args.eval, args.data
    if ev.eval_dir is None:
        return []
    batch = args.optim.batch_size * world_size
    if ev.eval_samples < batch:
        raise PreflightError(f"--eval_samples {ev.eval_samples}: below one global batch ({batch}); raise it")
    if not os.path.exists(ev.eval_dir):
        return None
    try:
        held = list_shards(ev.eval_dir)
    except ShardSetError as e:
        raise PreflightError(f"--eval_dir {e}") from None
    same = sorted({os.path.realpath(f) for f in held} & {os.path.realpath(f) for f in files})
    if not same and os.path.isdir(ev.eval_dir) and os.path.isdir(data.data_dir):
        digests = lambda d: {e.sha256: e.name for e in read_manifest(d).shards}  # noqa: E731
        train_digests = digests(data.data_dir)
        same = sorted(name for digest, name in digests(ev.eval_dir).items() if digest in train_digests)
    if same:
        raise PreflightError(
            f"--eval_dir {ev.eval_dir}: {same[0]} is also a training shard of --data_dir {data.data_dir} "
            f"({len(same)} shared); evaluate on shards made from held-out documents"
        )
    held_vocab, shards_vocab_sha = shards_vocab(ev.eval_dir), shards_vocab(data.data_dir)
    if held_vocab and shards_vocab_sha and held_vocab != shards_vocab_sha:
        raise PreflightError(
            f"--eval_dir {ev.eval_dir}: made with another vocab.txt (SHA-256 {held_vocab}) than --data_dir "
            f"{data.data_dir} ({shards_vocab_sha}); make the held-out set with the shards' vocabulary"
        )
    if os.path.isdir(ev.eval_dir):
        samples = sum(e.samples for e in read_manifest(ev.eval_dir).shards)
        if samples < ev.eval_samples:
            raise PreflightError(
                f"--eval_samples {ev.eval_samples}: --eval_dir {ev.eval_dir} holds {samples}; lower it"
            )
    check_shards(held, data.seq_len, data.max_pred_len, rank, world_size)
    return held


def preflight(args: PretrainArgs, rank: int, world_size: int) -> Ready:
    data, run = args.data, args.runtime
    files = list_checked(data.data_dir)
    output = Path(args.checkpoint.output_dir)
    outputs = [(output, "--output_dir")]
    if not run.precompile:  # the trial run writes nothing, so it creates none of these
        outputs += [
            (ckpt.checkpoint_root(output), "--output_dir"),
            (Path(run.tensorboard_dir), "--tensorboard_dir"),
            (Path(run.metrics_file).parent, "--metrics_file"),
            (Path(run.step_log).parent, "--step_log"),
        ]
    for path, flag in outputs:
        check_writable(path, flag)
    # The checkpoint before the shards: a refused flag (say --seq_len) is the clearer message.
    candidates, meta = ckpt.first_verified(
        ckpt.resume_candidates(ckpt.checkpoint_root(output), args.checkpoint.resume_ckpt)
    )
    applied, start, init_from = [], None, args.checkpoint.init_from
    if meta is not None:
        if meta.get("weights_only"):
            raise PreflightError(
                f"checkpoint {candidates[0]}: holds weights only (no optimizer or data state); "
                "start a new run from it with --init_from and another --output_dir"
            )
        applied = check_flags(recorded_run(meta), args.flags(), len(files), candidates[0])
        if init_from:  # a restart of a run that began from init_from: its own state is newer
            applied.append(f"--init_from {init_from} not read: resuming this run's {candidates[0]}")
    elif init_from:
        m = args.model
        start = check_start(
            init_from, model=m.model, vocab_size=m.vocab_size, seq_len=data.seq_len, data_dir=data.data_dir
        )
        applied.append(f"--init_from: the weights of {start.path} (step {start.meta['step']})")
    check_shards(files, data.seq_len, data.max_pred_len, rank, world_size)
    eval_files = held_out(args, files, rank, world_size)
    pending = args.eval.eval_dir if eval_files is None else None
    if pending is not None:
        applied.append(
            f"--eval_dir {pending}: not there yet (a staging Job may still be making it); the run "
            "evaluates from the first evaluation step that finds it"
        )
    return Ready(
        files, candidates, meta, applied, start, shards_vocab(data.data_dir), eval_files or [], pending
    )
