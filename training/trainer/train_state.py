"""A run's state in a checkpoint: ``save_state`` writes it, ``restore_state`` reads it back.

``training.trainer.checkpoint`` makes a checkpoint atomic and verifiable whatever it holds; this module
is the one place that knows what it holds of a training run. The layout is the one checkpoints
have always had, so checkpoints written by earlier versions resume:

* ``state.pt`` (rank 0): ``model`` (the Hugging Face state dict; the fp32 master values where
  the run keeps them), ``optimizer``, ``scheduler``, ``step``, ``data_epoch``, ``model_config``
  and ``args`` (every flag, for the record);
* ``rank_<r>.pt``: ``data_position`` (epoch, piece, offset: ``training.trainer.data.DataPosition``) and
  ``rng`` (the host RNGs and the device's: ``checkpoint.capture_rng_state``);
* ``meta.json``, beside the checkpoint's own keys: ``args`` (the flags ``training.trainer.resume``
  decides on), ``num_shards`` and ``loss`` (the last logged loss), ``model_config`` (the fields
  that shape the weights: ``training.trainer.init_from.MODEL_FIELDS``), ``vocab_sha256`` (of the
  shards' vocab.txt, when their manifest records it) and ``init_from`` (where a run started with
  ``--init_from`` took its weights). Pre-flight reads them without loading the state
  (``recorded_run``, ``init_from.check_start``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from . import checkpoint as ckpt
from .data import DataPosition
from .init_from import model_fields
from .model import PretrainingModule
from .optim import MasterWeights
from .resume import RecordedRun, saved_flags
from .step import StepState


def model_state(module: PretrainingModule, master: MasterWeights | None) -> dict[str, torch.Tensor]:
    """The HF model's state dict; with master weights, their fp32 values replace the bf16 ones."""
    state = module.hf_model.state_dict(keep_vars=True)
    masters = {id(p): m for p, m in master.pairs} if master else {}
    return {k: masters.get(id(v), v).detach() for k, v in state.items()}


def load_model_state(module: PretrainingModule, master: MasterWeights | None, state: dict) -> None:
    module.hf_model.load_state_dict(state)
    if master:
        by_id = {id(v): k for k, v in module.hf_model.state_dict(keep_vars=True).items()}
        master.load_from_model_state(state, [by_id[id(p)] for p, _ in master.pairs])


def save_state(
    root: Path,
    step: int,
    t: StepState,
    position: DataPosition,
    *,
    flags: Mapping[str, Any],
    num_shards: int,
    loss: float | None,
    keep: int,
    verify_and_prune: bool = True,
    init_from: Mapping[str, Any] | None = None,
    vocab_sha256: str | None = None,
) -> Path:
    """Checkpoint ``step`` under ``root``; collective, like ``checkpoint.save_checkpoint``.

    ``position``: where this rank's data stream continues; ``flags``: every flag of the run, by
    name; ``loss``: the last logged loss (rank 0's); ``init_from``: where the run's first weights
    came from (``init_from.StartPoint.source``); ``vocab_sha256``: the shards' vocabulary.
    Returns the checkpoint's directory.
    """
    config = t.module.hf_model.config.to_dict()
    lineage = {"init_from": dict(init_from)} if init_from else {}
    b = t.backend
    return ckpt.save_checkpoint(
        root,
        step,
        ckpt.Comm(b.rank, b.world_size, b.barrier),
        rank_state={"data_position": position.as_list(), "rng": ckpt.capture_rng_state(b.rng_state())},
        global_state=lambda: {
            "model": model_state(t.module, t.master),
            "optimizer": t.optimizer.state_dict(),
            "scheduler": t.scheduler.state_dict(),
            "step": step,
            "data_epoch": position.epoch,
            "model_config": config,
            "args": dict(flags),
            **lineage,
        },
        keep=keep,
        meta=lambda: {
            "args": saved_flags(flags),
            "num_shards": num_shards,
            "loss": loss,
            "model_config": model_fields(config),
            "vocab_sha256": vocab_sha256,
            **lineage,
        },
        verify_and_prune=verify_and_prune,
    )


def recorded_run(meta: Mapping[str, Any]) -> RecordedRun:
    """What a checkpoint's ``meta.json`` records of its run (nothing, before that was recorded)."""
    return RecordedRun(meta.get("args") or {}, meta.get("num_shards"), meta.get("loss"))


@dataclass(frozen=True)
class Restored:
    """Where a restored run continues."""

    step: int
    position: DataPosition
    #: False when another world size wrote the checkpoint: this rank's streams are to be seeded.
    rng_restored: bool


def restore_state(loaded: ckpt.Loaded, t: StepState) -> Restored:
    """Load a checkpoint into the model, optimizer and schedule of ``t``; with the world size
    that wrote it, also this rank's RNGs and data position, else the next data epoch."""
    load_model_state(t.module, t.master, loaded.state["model"])
    t.optimizer.load_state_dict(loaded.state["optimizer"])
    t.scheduler.load_state_dict(loaded.state["scheduler"])
    if loaded.rank_state is None:
        return Restored(loaded.step, DataPosition(epoch=int(loaded.state.get("data_epoch", 0)) + 1), False)
    t.backend.set_rng_state(ckpt.restore_rng_state(loaded.rank_state["rng"]))
    return Restored(loaded.step, DataPosition(*loaded.rank_state["data_position"]), True)
