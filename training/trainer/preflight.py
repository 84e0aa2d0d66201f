"""Pre-flight: everything that can fail on the inputs fails before the first step.

Run by every rank before the device runtime, the process group or the model exist, so a bad
input costs seconds, not a compiled graph and 64 NeuronCores idling until step 200:

* every shard is opened and its datasets' names, dtypes and shapes checked from the HDF5
  header (no data read; rank r checks shards r, r+W, ... so each is opened once per job);
* the output, checkpoint and TensorBoard directories and the metrics/log files' directories
  are created if needed and proven writable (a file is created and removed);
* the checkpoint to resume from is verified against its digests (older ones are tried when it
  fails, see ``training.trainer.checkpoint.first_verified``), and the run's flags are compared with
  the ones it recorded (``training.trainer.resume``).

Errors are one line naming the file or flag, the value and the fix (``PreflightError``,
``CheckpointError``, ``ResumeError``); ``python -m training.trainer.pretrain`` prints them without a
traceback unless ``--debug``.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from training.dataprep.shard_format import ShardSetError
from training.trainer import checkpoint as ckpt
from training.trainer.cli import PretrainArgs
from training.trainer.data import ShardFormatError, check_shard, list_shards
from training.trainer.resume import check_flags
from training.trainer.train_state import recorded_run

log = logging.getLogger(__name__)


class PreflightError(RuntimeError):
    """An input that would fail the run later; the message is one line naming it."""


@dataclass
class Ready:
    """What pre-flight found: the shards and the checkpoints to resume from (first verified)."""

    files: list[str]
    candidates: list[Path] = field(default_factory=list)
    meta: dict[str, Any] | None = None
    applied: list[str] = field(default_factory=list)


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
    applied = []
    if meta is not None:
        applied = check_flags(recorded_run(meta), args.flags(), len(files), candidates[0])
    check_shards(files, data.seq_len, data.max_pred_len, rank, world_size)
    return Ready(files, candidates, meta, applied)
