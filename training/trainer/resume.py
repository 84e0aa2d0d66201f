"""Honest resume: what a resumed run does with flags that differ from its checkpoint's.

Each flag that shapes the training state is either applied (the run continues with the new
value, correctly) or refused (a one-line error naming the flag, before the first step). The
checkpoint's ``meta.json`` records the flags (``saved_flags``; ``training.trainer.train_state`` writes
and reads it), so pre-flight decides without loading the state. docs/training.md ("Changing flags
on resume") shows this table; a test keeps them in step.

The loss check: a resumed run's first logged loss is compared with the loss recorded at the
save. Weights that verify but are wrong (a bug, memory corruption before the write) show as a
jump; training on them would waste the job, so the run stops with the checkpoint's name.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

APPLIED, REFUSED = "applied", "refused"

#: flag -> (decision, why) for every flag that shapes the training state. Every other flag is in
#: :data:`STATELESS_FLAGS`; a test fails for a flag in neither.
RESUME_FLAGS: dict[str, tuple[str, str]] = {
    "lr": (APPLIED, "the peak LR of every parameter group is replaced and the next update's LR recomputed"),
    "warmup_steps": (APPLIED, "the schedule is always this run's; the next update's LR is recomputed"),
    "max_steps": (APPLIED, "the schedule is recomputed and the run ends at the new value"),
    "weight_decay": (APPLIED, "the decay group takes the new value; bias and LayerNorm stay at 0"),
    "max_grad_norm": (APPLIED, "read at every step; not part of the state"),
    "batch_size": (APPLIED, "data positions count samples, so each rank continues at the same sample"),
    "grad_accum_usteps": (APPLIED, "not part of the state; the global batch changes from the next step"),
    "precision": (APPLIED, "weights are cast on load; torch casts optimizer moments to the weights' dtype"),
    "mlm_head": (APPLIED, "both heads have the same parameters"),
    "model": (REFUSED, "the checkpoint's weights have another shape"),
    "vocab_size": (REFUSED, "the checkpoint's embeddings have another shape"),
    "optimizer": (REFUSED, "the optimizer state belongs to the other optimizer"),
    "fp32_master_weights": (REFUSED, "the optimizer state belongs to the other copy of the weights"),
    "seq_len": (REFUSED, "another data format: start phase 2 in a new --output_dir with --init_from"),
    "max_pred_len": (REFUSED, "another data format: start a new --output_dir"),
    "seed": (REFUSED, "the data order follows the seed: the saved positions would point at other samples"),
}
#: flag -> why it holds no training state: a resumed run simply takes its new value.
STATELESS_FLAGS: dict[str, str] = {
    "data_dir": "where the shards are; their count is checked against the checkpoint's separately",
    "output_dir": "where checkpoints are found and written; another one starts a new run",
    "resume_ckpt": "which checkpoint to start from",
    "init_from": "the weights of a new run's first step; a resumed run continues from its own checkpoints",
    "eval_dir": "the held-out set is read, never trained on",
    "eval_every": "when the next evaluations run",
    "eval_samples": "how many held-out samples the next evaluations read",
    "steps_this_run": "where this run stops; the schedule is max_steps'",
    "checkpoint_every": "when the next checkpoints are written",
    "keep_checkpoints": "how many old checkpoints are deleted",
    "num_workers": "loader processes; data positions count samples, whatever reads them",
    "device": "weights and optimizer state load onto any device",
    "log_every": "how often a line is logged",
    "metrics_file": "where the final metrics go",
    "step_log": "where the per-step log goes",
    "tensorboard_dir": "where the events go",
    "metrics_port": "where Prometheus scrapes",
    "peak_tflops": "the MFU denominator, reporting only",
    "precompile": "a trial run writes no checkpoint",
    "debug": "tracebacks of input errors",
    "param_digest": "a debugging dump of the final weights",
    "hang_floor_s": "how long a step may wait before the watchdog ends the process",
    "hang_factor": "the watchdog's bound; the step times it follows are this process's",
    "hang_warmup_steps": "steps of each process without a bound",
    "collective_timeout_s": "the process group's timeout, set when the process starts",
}
#: A resumed run fails when its first loss is above FACTOR x recorded + MARGIN (nats) or not
#: finite. Loose on purpose: one batch's loss varies by tens of percent; a wrong state is off by
#: orders of magnitude (a damaged state.pt: 8.8 -> 1.9e7 in the issue that asked for this).
LOSS_JUMP_FACTOR = 2.0
LOSS_JUMP_MARGIN = 1.0


class ResumeError(RuntimeError):
    """A resume that cannot be honest; the message is one line naming the flag or checkpoint."""


@dataclass(frozen=True)
class RecordedRun:
    """What a checkpoint records of the run that wrote it (``training.trainer.train_state``)."""

    #: ``saved_flags`` of that run; empty for a checkpoint written before flags were recorded.
    flags: Mapping[str, Any] = field(default_factory=dict)
    #: Its shard count (positions index the sorted shard list, so it is checked too).
    num_shards: int | None = None
    #: Its last logged loss (``check_resumed_loss``).
    loss: float | None = None


def saved_flags(flags: Mapping[str, Any]) -> dict[str, Any]:
    """What a checkpoint records of a run's flags (``flags``: all of them, by name)."""
    return {name: flags[name] for name in RESUME_FLAGS}


def check_flags(recorded: RecordedRun, flags: Mapping[str, Any], num_shards: int, path: Path) -> list[str]:
    """Refuse (ResumeError) a refused flag that changed; return a line per applied change.

    A checkpoint without recorded flags (written before they were) is not checked.
    """
    saved = recorded.flags
    applied = []
    for name, (decision, why) in RESUME_FLAGS.items():
        if name not in saved or saved[name] == flags[name]:
            continue
        old, new = saved[name], flags[name]
        if decision == REFUSED:
            if isinstance(old, bool):
                change = f"--{name} is {'set' if new else 'not set'}, unlike in the run of checkpoint {path}"
                fix = f"resume {'with' if old else 'without'} --{name}"
            else:
                change, fix = (
                    f"--{name} {new} differs from {old} in checkpoint {path}",
                    f"resume with --{name} {old}",
                )
            raise ResumeError(f"{change}: {why}; {fix} or use a new --output_dir")
        applied.append(f"--{name} changed from {old} to {new} since checkpoint {path.name}: applied ({why})")
    old_shards = recorded.num_shards
    if old_shards is not None and old_shards != num_shards:
        raise ResumeError(
            f"--data_dir {flags['data_dir']} holds {num_shards} shards, the run of checkpoint {path} read "
            f"{old_shards}: the saved data positions would point at other samples; restore the "
            "shards or use a new --output_dir"
        )
    return applied


def check_resumed_loss(loss: float, recorded: float | None, path: Path, step: int) -> None:
    """ResumeError when the first loss after resuming from ``path`` is not finite or jumped."""
    if not math.isfinite(loss):
        raise ResumeError(
            f"loss {loss} at step {step}, the first after resuming from {path}: "
            "the restored state is wrong; move that checkpoint out to fall back to an older one"
        )
    if recorded is not None and loss > LOSS_JUMP_FACTOR * recorded + LOSS_JUMP_MARGIN:
        raise ResumeError(
            f"loss {loss:.4g} at step {step}, the first after resuming from {path}, which "
            f"recorded {recorded:.4g}: the restored state is wrong; move that checkpoint "
            "out to fall back to an older one"
        )
