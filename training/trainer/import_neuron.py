"""Import a checkpoint of Neuron's BERT tutorial as a start for ``--init_from`` (phase 2 alone).

    python -m training.trainer.import_neuron SRC OUT [--model large] [--step N]

SRC is a ``ckpt_<step>.pt`` of aws-neuron-samples'
``torch-neuronx/training/dp_bert_hf_pretrain/dp_bert_large_hf_pretrain_hdf5.py``, such as the
published ``s3://neuron-s3/training_checkpoints/pytorch/dp_bert_large_hf_pretrain/ckpt_28125.pt``.
That script saves, in ``train_bert_hdf5``, ``torch.save({'model': model.state_dict(), 'optimizer':
..., 'scheduler': ..., 'files': [file index] + files, 'epoch': epoch})`` (``--minimal_ckpt``: no
optimizer and scheduler) of a Hugging Face ``BertForPreTraining``, names the file after the step,
and loads it with ``fix_ckpt_params`` (each ``dense_act`` becomes ``dense``, ``module.`` is
removed) and ``load_state_dict(strict=True)`` (the same at the release commit of 2022-10-06,
f4c6f69, and at 2015d650cd89e4c671ae5bd1b5f1d4499d94d4dd, the file of tag v2.27.0).

Two layouts of that state dict exist, after the transformers release that the samples'
requirements.txt pins: 4.15.0 from the file's first commit (2022-10-06) and 4.26.0 from 2023-02-23, in
both of which ``BertEmbeddings`` registers ``position_ids = torch.arange(max_position_embeddings)
.expand((1, -1))`` as a persistent buffer (``models/bert/modeling_bert.py`` lines 179-181 at
v4.15.0), so the file holds ``bert.embeddings.position_ids`` (int64, shape ``(1,
max_position_embeddings)``); and 4.44.0 from 2024-09-27 (the current script), where the buffer is
``persistent=False`` (since 4.31) and not saved. The published file is of the first kind (written
under 4.15.0: the tutorial's log shows ``"transformers_version": "4.15.0"``). Both are accepted: the
buffer, where present, must be exactly that ``arange`` (else it is refused, naming the key) and is
dropped, as this project's ``BertForPreTraining`` neither saves nor loads it.

The import does the loader's renames, then requires exactly the state dict keys of this project's
``BertForPreTraining`` of ``--model`` (the same class, so the names are the same): any key left over
or missing, or a tensor of another shape, is named in the error. The vocabulary size is the
checkpoint's (its word embeddings); the head count, which no shape shows, is ``--model``'s. Only the
weights are kept: the tutorial's phase 2 does not load its optimizer or schedule either, and its
optimizer (transformers' ``AdamW`` in 2022, ``AdamW_FP32OptimParams`` by default now) is not this
project's. The file (about 4 GB for BERT-large with its optimizer state) is memory-mapped: the
process holds no copy of it beside the kernel's page cache.

OUT gets a checkpoint in this project's format (``training.trainer.checkpoint``: atomic, every file's
SHA-256 in ``meta.json``, read back and verified), ``OUT/checkpoints/step_<step>``, marked
``weights_only`` (so it cannot be resumed as a run), recording the source file's SHA-256, step
and epoch under ``imported_from``. Start phase 2 from it with ``--init_from OUT``.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import BertConfig, BertForPreTraining

from trainium_job.spec import MODELS

from . import checkpoint as ckpt
from .init_from import model_fields
from .model import load_config

log = logging.getLogger("training.trainer.import_neuron")

SOURCE_FORMAT = "aws-neuron-samples dp_bert_large_hf_pretrain_hdf5.py torch.save"
WORD_EMBEDDINGS = "bert.embeddings.word_embeddings.weight"
#: The buffer that transformers up to 4.30 saves (4.15.0: ``BertEmbeddings.__init__``,
#: ``register_buffer("position_ids", torch.arange(config.max_position_embeddings).expand((1, -1)))``)
#: and today's ``BertForPreTraining`` does not (``persistent=False``): checked, then dropped.
POSITION_IDS = "bert.embeddings.position_ids"
#: A zip file's first local header, which ``torch.save`` writes first since torch 1.6 (its default
#: ``_use_new_zipfile_serialization=True``) and which ``torch.load(mmap=True)`` requires.
_ZIP_MAGIC = b"PK\x03\x04"
#: Parameters the tutorial ties (``model.tie_weights()`` and its ``decoder.bias = predictions.bias``):
#: the state dict holds each twice, and the two copies must agree.
TIED = (
    ("cls.predictions.decoder.weight", WORD_EMBEDDINGS),
    ("cls.predictions.decoder.bias", "cls.predictions.bias"),
)
_STEP_IN_NAME = re.compile(r"^ckpt_(\d+)\.pt$")
_LISTED = 8  # keys named in an error before "and N more"


class NeuronImportError(RuntimeError):
    """A source that cannot be imported; the message is one line naming it and the keys."""


def renamed(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The tutorial loader's renames (``fix_ckpt_params``): ``dense_act`` -> ``dense``, no ``module.``."""
    out = {}
    for key, value in state.items():
        key = key.replace("dense_act", "dense")
        if key.startswith("module."):
            key = key.replace("module.", "")
        out[key] = value
    return out


def _listed(keys: Sequence[str]) -> str:
    shown = ", ".join(keys[:_LISTED])
    return shown + (f" and {len(keys) - _LISTED} more" if len(keys) > _LISTED else "")


def source_step(src: Path, step: int | None) -> int:
    """The step of the source: ``--step``, else its file name (the tutorial writes ``ckpt_<step>.pt``)."""
    if step is not None:
        return step
    m = _STEP_IN_NAME.match(src.name)
    if m is None:
        raise NeuronImportError(f"{src}: the name is not ckpt_<step>.pt; give the step with --step")
    return int(m.group(1))


def read_source(src: Path) -> dict[str, Any]:
    """The tutorial's saved dict. ``weights_only``: tensors, dicts, lists and numbers only, so a
    downloaded file cannot run code while it is read (what the tutorial saves is all of that)."""
    if not src.is_file():
        raise NeuronImportError(f"{src}: no such file")
    with src.open("rb") as f:
        # Mapped, the file's pages are the tensors' memory: only what is used is read, and not
        # copied. A pre-1.6 (non-zip) file cannot be mapped; it is read whole.
        zipped = f.read(len(_ZIP_MAGIC)) == _ZIP_MAGIC
    try:
        data = torch.load(src, map_location="cpu", weights_only=True, mmap=zipped)
    except Exception as e:  # noqa: BLE001 - any unpickling failure means the file is not the format
        first = (str(e).strip().splitlines() or [""])[0]
        raise NeuronImportError(
            f"{src}: cannot be read as {SOURCE_FORMAT} ({type(e).__name__}: {first})"
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        keys = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise NeuronImportError(
            f"{src}: no 'model' state dict (found {keys}); not a {SOURCE_FORMAT} checkpoint"
        )
    return data


def target_config(model: str, state: Mapping[str, torch.Tensor], src: Path) -> BertConfig:
    """``--model``'s config with the checkpoint's vocabulary size."""
    if WORD_EMBEDDINGS not in state:
        raise NeuronImportError(f"{src}: missing key {WORD_EMBEDDINGS}; not a BertForPreTraining state dict")
    return load_config(model, vocab_size=int(state[WORD_EMBEDDINGS].shape[0]))


def without_position_ids(
    theirs: Mapping[str, torch.Tensor], config: BertConfig, src: Path
) -> dict[str, torch.Tensor]:
    """The state dict less :data:`POSITION_IDS`, which must be what transformers 4.15.0 registers:
    ``arange(max_position_embeddings)`` of shape ``(1, max_position_embeddings)``. Any integer dtype
    (4.15.0's is int64): the tutorial's ``load_state_dict`` copies the values into its int64 buffer
    and checks only the shape. Our model's buffer is that ``arange`` and is not loaded, so a model
    trained on other position ids could not be carried over."""
    out = dict(theirs)
    ids = out.pop(POSITION_IDS, None)
    if ids is None:
        return out
    positions = config.max_position_embeddings
    if tuple(ids.shape) != (1, positions):
        problem = f"has shape {tuple(ids.shape)}, not (1, {positions})"
    elif ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        problem = f"is {ids.dtype}, not an integer tensor"
    elif not torch.equal(ids.to(torch.int64), torch.arange(positions)[None]):
        first = int((ids.to(torch.int64)[0] != torch.arange(positions)).nonzero()[0])
        problem = f"is not 0..{positions - 1} (position {first} holds {int(ids[0, first])})"
    else:
        log.info(
            "%s: %s is arange(%d), as transformers 4.15.0 saves it; dropped", src, POSITION_IDS, positions
        )
        return out
    raise NeuronImportError(
        f"{src}: {POSITION_IDS} {problem}: transformers 4.15.0 saves torch.arange(max_position_embeddings) "
        f"there ({positions} for --model), and a model trained on other position ids cannot be imported"
    )


def mapped_weights(theirs: Mapping[str, torch.Tensor], config: BertConfig, src: Path, model: str) -> dict:
    """The (renamed) weights checked against this project's names and shapes; NeuronImportError naming
    every key that does not fit."""
    with torch.device("meta"):  # names and shapes only: no memory for BERT-large's weights
        ours = {k: v.shape for k, v in BertForPreTraining(config).state_dict().items()}
    unknown = sorted(set(theirs) - set(ours))
    missing = sorted(set(ours) - set(theirs))
    shapes = [
        f"{k} {tuple(theirs[k].shape)} (--model {model}: {tuple(ours[k])})"
        for k in sorted(set(ours) & set(theirs))
        if tuple(theirs[k].shape) != tuple(ours[k])
    ]
    problems = []
    if unknown:
        problems.append(f"unknown key(s) {_listed(unknown)}")
    if missing:
        problems.append(f"missing key(s) {_listed(missing)}")
    if shapes:
        problems.append(f"other shape(s) {_listed(shapes)}")
    if problems:
        raise NeuronImportError(
            f"{src}: does not fit BertForPreTraining of --model {model}: {'; '.join(problems)}; "
            "give the --model it was trained as, or a checkpoint of the tutorial's script"
        )
    for a, b in TIED:
        if not torch.equal(theirs[a], theirs[b]):
            raise NeuronImportError(f"{src}: {a} differs from {b}, which the tutorial's model ties to it")
    return {k: v.detach().contiguous() for k, v in theirs.items()}


def import_checkpoint(src: Path, out: Path, *, model: str = "large", step: int | None = None) -> Path:
    """Convert ``src`` into a verified weights-only checkpoint under ``out``; returns its directory."""
    at = source_step(src, step)
    data = read_source(src)
    theirs = renamed(data["model"])
    config = target_config(model, theirs, src)
    weights = mapped_weights(without_position_ids(theirs, config, src), config, src, model)
    digest = ckpt.file_digest(src)
    imported_from = {
        "format": SOURCE_FORMAT,
        "path": str(src.resolve()),
        "bytes": digest["bytes"],
        ckpt.DIGEST: digest[ckpt.DIGEST],
        "step": at,
        "epoch": data.get("epoch"),
        "dropped": sorted(k for k in data if k != "model"),  # optimizer, scheduler, files, epoch
    }
    config.architectures = ["BertForPreTraining"]
    path = ckpt.save_checkpoint(
        ckpt.checkpoint_root(out),
        at,
        ckpt.Comm(),
        rank_state={},
        global_state=lambda: {
            "model": weights,
            "step": at,
            "model_config": config.to_dict(),
            "imported_from": imported_from,
        },
        keep=2**31,  # pruning is a training run's business: leave other imports alone
        meta=lambda: {
            "weights_only": True,
            "model_config": model_fields(config.to_dict()),
            "imported_from": imported_from,
        },
    )
    ckpt.verify(path)  # raises, naming the file, where save_checkpoint only logs
    return path


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m training.trainer.import_neuron",
        description="Import a ckpt_<step>.pt of Neuron's dp_bert_hf_pretrain tutorial as a start for --init_from.",
    )
    p.add_argument("src", type=Path, help="the tutorial's checkpoint file, e.g. ckpt_28125.pt")
    p.add_argument("out", type=Path, help="directory to write the checkpoint into (OUT/checkpoints/step_*)")
    p.add_argument("--model", default="large", choices=MODELS, help="the model it was trained as")
    p.add_argument("--step", type=int, default=None, help="its step (default: from the ckpt_<step>.pt name)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        path = import_checkpoint(args.src, args.out, model=args.model, step=args.step)
    except (NeuronImportError, ckpt.CheckpointError, OSError) as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 2
    print(f"wrote {path}; start phase 2 from it with --init_from {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
