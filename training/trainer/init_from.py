"""A new run from another run's weights: ``--init_from`` (phase 2 from phase 1).

The start checkpoint gives the weights only. The run has its own optimizer (fresh moments), its
own schedule (warm-up from step 0 to ``--max_steps``), its own data order and its own
``--output_dir``, and counts its steps from 0. It checkpoints and resumes as any run: once its
``--output_dir`` holds a checkpoint, a restart resumes from that and ``--init_from`` is not read
again (it may even be gone).

Pre-flight (``check_start``) refuses, before the device or the model exist, a start checkpoint
that fails its digests, is of another model (any of ``MODEL_FIELDS`` differs: each is named with
both values), does not cover ``--seq_len`` with its position embeddings, or was trained on shards
of another vocabulary (both shard sets' manifests record ``vocab_sha256``). Every checkpoint of the
new run, and its metrics file, record where its weights came from (``StartPoint.source``).

docs/training.md ("Phase 2") compares this with the Neuron tutorial's ``--phase2 --resume_ckpt``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..dataprep.shard_format import ShardSetError, read_manifest
from . import checkpoint as ckpt
from .model import load_config

log = logging.getLogger(__name__)

#: The config fields that decide the weights' shapes (and, for the heads, how they are split).
MODEL_FIELDS = (
    "num_hidden_layers",
    "hidden_size",
    "num_attention_heads",
    "intermediate_size",
    "vocab_size",
    "max_position_embeddings",
    "type_vocab_size",
)


class InitFromError(RuntimeError):
    """A start checkpoint this run cannot start from; the message is one line naming it."""


def model_fields(config: Mapping[str, Any]) -> dict[str, int]:
    """What a checkpoint's meta records of its model (``config``: a ``BertConfig.to_dict()``)."""
    return {name: int(config[name]) for name in MODEL_FIELDS}


def shards_vocab(data_dir: str) -> str | None:
    """The SHA-256 of the vocab.txt a shard set was made with (its manifest's), None if not recorded."""
    if not Path(data_dir).is_dir():
        return None  # a single HDF5 file has no manifest
    try:
        return read_manifest(data_dir).settings.get("vocab_sha256")
    except ShardSetError:
        return None


@dataclass(frozen=True)
class StartPoint:
    """A verified start checkpoint and its ``meta.json``."""

    path: Path
    meta: Mapping[str, Any]

    @property
    def source(self) -> dict[str, Any]:
        """Where the weights came from, as the new run records it: the checkpoint, the run that
        wrote it (its ``--output_dir``), its step, the digest of its ``state.pt``, and what that
        run itself started from or was imported from."""
        record: dict[str, Any] = {
            "checkpoint": str(self.path.resolve()),
            "run": str(self.path.resolve().parent.parent),
            "step": int(self.meta["step"]),
            f"state_{ckpt.DIGEST}": (self.meta.get("files") or {}).get(ckpt.STATE_FILE, {}).get(ckpt.DIGEST),
        }
        for key in ("init_from", "imported_from"):
            if self.meta.get(key):
                record[key] = self.meta[key]
        return record


def find_start(requested: str, flag: str = "--init_from") -> Path:
    """The checkpoint directory ``requested`` names: itself, or a run directory's newest checkpoint."""
    path = Path(requested)
    if not path.is_dir():
        raise InitFromError(
            f"{flag} {path}: no such directory; give a checkpoint directory (step_*) or the "
            "--output_dir of a run"
        )
    if (path / ckpt.META_FILE).is_file():
        return path
    found = ckpt.step_dirs(ckpt.checkpoint_root(path))
    if not found:
        raise InitFromError(
            f"{flag} {path}: neither a checkpoint (no {ckpt.META_FILE}) nor a run directory with "
            "checkpoints/step_*; give a checkpoint directory or the --output_dir of a run"
        )
    return found[-1][1]  # the newest, verified next: a damaged one fails rather than falling back


def recorded_model(meta: Mapping[str, Any]) -> dict[str, int]:
    """The model fields a checkpoint's meta records; from its flags for a checkpoint written before."""
    if "model_config" in meta:
        return {k: int(v) for k, v in meta["model_config"].items()}
    flags = meta.get("args") or {}
    if "model" not in flags:
        raise InitFromError(f"{ckpt.META_FILE} records neither model_config nor the run's --model")
    return model_fields(load_config(flags["model"], vocab_size=flags.get("vocab_size")).to_dict())


def check_model(theirs: Mapping[str, int], ours: Mapping[str, int], path: Path, model: str) -> None:
    """InitFromError naming every model field that differs, with both values."""
    differ = [f"{k} {theirs.get(k)} there, {ours[k]} here" for k in MODEL_FIELDS if theirs.get(k) != ours[k]]
    if differ:
        raise InitFromError(
            f"--init_from {path}: another model ({'; '.join(differ)}); start from a checkpoint of "
            f"--model {model} with this --vocab_size, or give this run the start checkpoint's"
        )


def check_start(
    requested: str, *, model: str, vocab_size: int | None, seq_len: int, data_dir: str
) -> StartPoint:
    """Pre-flight of ``--init_from``: find it, verify its digests, refuse another model or vocabulary."""
    path = find_start(requested)
    meta = ckpt.verify(path)
    ours = model_fields(load_config(model, vocab_size=vocab_size).to_dict())
    try:
        theirs = recorded_model(meta)
    except InitFromError as e:
        raise InitFromError(f"--init_from {path}: {e}") from None
    # Before the model check, which would name the field too: this says what to do about it.
    if seq_len > theirs["max_position_embeddings"]:
        raise InitFromError(
            f"--init_from {path}: its position embeddings cover {theirs['max_position_embeddings']} "
            f"tokens, --seq_len is {seq_len}; lower --seq_len or start from a model with more positions"
        )
    check_model(theirs, ours, path, model)
    vocab_then, vocab_now = meta.get("vocab_sha256"), shards_vocab(data_dir)
    if vocab_then and vocab_now and vocab_then != vocab_now:
        raise InitFromError(
            f"--init_from {path}: trained on shards of another vocabulary (vocab_sha256 {vocab_then[:16]}, "
            f"--data_dir {data_dir} has {vocab_now[:16]}): token ids mean other words; make the shards "
            "with the start checkpoint's vocab.txt"
        )
    return StartPoint(path, meta)


def start_weights(start: StartPoint) -> dict[str, torch.Tensor]:
    """The Hugging Face state dict of a start checkpoint (verified by pre-flight)."""
    state = ckpt.load_state(start.path)
    if not isinstance(state.get("model"), dict):
        raise InitFromError(f"--init_from {start.path / ckpt.STATE_FILE}: holds no 'model' state dict")
    return state["model"]
