"""The command line of ``python -m training.trainer.pretrain``, importable without torch.

The CDK app checks ``training_script_args`` against this parser at synth, and the TorchX
component renders flags from it, so it must load without torch, transformers or torch-xla. The
choice tuples live here for the same reason; the modules that implement them import them from here.

The flags are grouped by concern in frozen dataclasses, one field per flag with its help and
argparse options in the field's metadata (the way Hugging Face's ``run_mlm.py`` groups its
arguments); ``build_parser`` derives the parser from them and ``parse_args`` returns them as
one ``PretrainArgs``. A field's annotation is the type the run sees: a ``None`` default on a
field not annotated ``| None`` is filled in by ``parse_args`` from other flags, as its help says.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainium_job.launch import PRECOMPILE_FLAG
from trainium_job.spec import MODELS, PHASE1_MAX_STEPS

DEVICES = ("auto", "xla", "cuda", "cpu")
PRECISIONS = ("auto", "fp32", "bf16", "amp_bf16")
OPTIMIZERS = ("adamw", "lamb")
MLM_HEADS = ("sparse", "dense")
DESCRIPTION = """BERT phase-1 pretraining (one process per device; run it under torchrun).

Reads rank/world from torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK) and resumes by
itself from the newest complete checkpoint in --output_dir. The reference script's flag names
and defaults are kept."""


def flag(default: Any, help: str, **options: Any) -> Any:
    """A dataclass field that is a flag: ``help`` and other ``add_argument`` options ride in
    its metadata (``option``: the flag's spelling when it is not ``--<field name>``)."""
    return dataclasses.field(default=default, metadata={"help": help, **options})


@dataclass(frozen=True)
class ModelArguments:
    """Which BERT to build."""

    model: str = flag("large", "model_configs/<name>.json", choices=MODELS)
    vocab_size: int | None = flag(None, "override the config's vocabulary size")
    mlm_head: str = flag(
        "sparse",
        "sparse: LM head on the masked positions only; dense: Hugging Face's forward",
        choices=MLM_HEADS,
    )


@dataclass(frozen=True)
class OptimizationArguments:
    """The batch, the optimizer and its learning-rate schedule."""

    batch_size: int = flag(16, "micro-batch per worker")
    grad_accum_usteps: int = flag(32, "micro-batches per optimizer step")
    max_steps: int = flag(PHASE1_MAX_STEPS, "optimizer steps of the whole schedule")
    steps_this_run: int = flag(None, "stop after this many steps (default: max_steps)")
    lr: float = flag(4e-4, "peak learning rate")
    warmup_steps: int = flag(2000, "optimizer steps of linear warm-up to --lr; then it decays linearly")
    optimizer: str = flag("adamw", "adamw (torch) or lamb (training.trainer.optim)", choices=OPTIMIZERS)
    weight_decay: float = flag(0.01, "weight decay of the weights (biases and LayerNorm get none)")
    max_grad_norm: float = flag(1.0, "gradients are clipped to this global L2 norm")
    fp32_master_weights: bool = flag(
        False, "with bf16: optimizer updates fp32 copies (no stochastic rounding)"
    )


@dataclass(frozen=True)
class DataArguments:
    """The shards and how they are read."""

    data_dir: str = flag(
        dataclasses.MISSING,
        "a shard set (directory with manifest.json, see training.dataprep.shard_format) or one HDF5 "
        "file, such as the reference data tool's --output_file",
        required=True,
    )
    seq_len: int = flag(128, "tokens per sample, as the shards were made (at most 512)")
    max_pred_len: int = flag(20, "masked positions per sample, as the shards were made")
    num_workers: int = flag(0, "loader processes: 0 or 1")


@dataclass(frozen=True)
class EvalArguments:
    """Held-out evaluation (training.trainer.evaluate): masked-LM loss and accuracy, next-sentence
    accuracy on a shard set the training never reads."""

    eval_dir: str | None = flag(
        None,
        "held-out shard set (as --data_dir, same --seq_len and --max_pred_len), evaluated from the first "
        "evaluation step that finds it (it may come during the run); none: no evaluation",
    )
    eval_every: int = flag(
        0, "optimizer steps between evaluations (and after the last step); 0: the last only"
    )
    eval_samples: int = flag(
        10000, "held-out samples per evaluation (whole global batches; MLPerf uses 10,000)"
    )


@dataclass(frozen=True)
class CheckpointArguments:
    """Where the run keeps its checkpoints and outputs, and what it resumes from."""

    output_dir: str = flag("./output", "checkpoints, logs, metrics (shared by all nodes)")
    resume_ckpt: str = flag(
        "auto",
        "'auto' (default, also the bare flag): newest complete checkpoint in output_dir; "
        "or a checkpoint directory, used unless output_dir holds a newer one",
        nargs="?",
        const="auto",
    )
    init_from: str | None = flag(
        None,
        "start a new run from these weights only (phase 2 from phase 1): a checkpoint directory "
        "(step_*, or one written by training.trainer.import_neuron) or a run's --output_dir (its newest "
        "checkpoint); its own optimizer and schedule; ignored once --output_dir holds a checkpoint",
    )
    checkpoint_every: int = flag(200, "optimizer steps between checkpoints")
    keep_checkpoints: int = flag(3, "checkpoints kept: the newest verified one and those before it")


@dataclass(frozen=True)
class RuntimeArguments:
    """The device, the numerics, seeding, logging and debugging."""

    device: str = flag(
        "auto", "auto: xla on Neuron (or PJRT_DEVICE set), else cuda, else cpu", choices=DEVICES
    )
    precision: str = flag(
        "auto", "auto: xla->bf16 (+stochastic rounding), cuda->amp_bf16, cpu->fp32", choices=PRECISIONS
    )
    seed: int = flag(12349, "initial weights, dropout masks and the data order follow it")
    tensorboard_dir: str = flag(None, "default: <output_dir>/tensorboard")
    metrics_file: str = flag(None, "final JSON metrics; default: <output_dir>/metrics.json")
    step_log: str = flag(None, "per-step JSONL; default: <output_dir>/train_log.jsonl")
    log_every: int = flag(0, "optimizer steps between log lines (and the last step); 0: 10 on xla, else 1")
    peak_tflops: float | None = flag(None, "device BF16 peak for MFU (overrides the table)")
    metrics_port: int = flag(
        0,
        "Prometheus metrics on this port from LOCAL_RANK 0 of each node (training.trainer.prom_metrics); 0: off",
    )
    precompile: bool = flag(
        False,
        "neuron_parallel_compile trial run: write no checkpoint, metrics or TensorBoard",
        option=PRECOMPILE_FLAG,
    )
    debug: bool = flag(False, "show the traceback of input errors (by default: one line and exit code 2)")
    param_digest: bool = flag(
        False, "debug: each rank writes a hash of its final weights to <output_dir>/param_digest/"
    )


@dataclass(frozen=True)
class HangArguments:
    """The step watchdog (training.trainer.watchdog): a rank whose optimizer step waits past its bound
    ends its process (trainium_job.hang.HANG_EXIT_CODE), so the job restarts from the last checkpoint."""

    hang_floor_s: float = flag(
        300.0,
        "an optimizer step may always take this long before the watchdog ends the process; 0: no watchdog",
    )
    hang_factor: float = flag(
        10.0,
        "the bound is max(--hang_floor_s, this x the median of the last 50 optimizer step times)",
    )
    hang_warmup_steps: int = flag(
        3,
        "optimizer steps at the start of each process with no bound (graph compilation on XLA); "
        "checkpoint saves have none either",
    )
    collective_timeout_s: float = flag(
        1800.0,
        "a gloo or NCCL collective waiting longer raises (torch's timeout of the process group): the "
        "ceiling where the watchdog sets none; above --hang_floor_s. XLA's own collectives ignore it",
    )


@dataclass(frozen=True)
class PretrainArgs:
    """Every flag of a run, by group; made by ``parse_args``."""

    model: ModelArguments
    optim: OptimizationArguments
    data: DataArguments
    eval: EvalArguments
    checkpoint: CheckpointArguments
    runtime: RuntimeArguments
    hang: HangArguments

    def flags(self) -> dict[str, Any]:
        """Flag name (without ``--``) -> value, flat: what a checkpoint records of its run."""
        return {name: value for group in dataclasses.asdict(self).values() for name, value in group.items()}

    @classmethod
    def from_flags(cls, flags: Mapping[str, Any]) -> PretrainArgs:
        """The groups of a flat flag -> value mapping (every flag given)."""
        return cls(
            **{
                name: group(**{f.name: flags[f.name] for f in dataclasses.fields(group)})
                for name, group in _group_types().items()
            }
        )


def _group_types() -> dict[str, type]:
    """``PretrainArgs``' field name -> its group dataclass."""
    hints = typing.get_type_hints(PretrainArgs)
    return {f.name: hints[f.name] for f in dataclasses.fields(PretrainArgs)}


def _add_flag(group: argparse._ArgumentGroup, field: dataclasses.Field[Any], hint: Any) -> None:
    options = dict(field.metadata)
    option = options.pop("option", f"--{field.name}")
    if field.default is not dataclasses.MISSING:
        options["default"] = field.default
    # The flag's value type: ``int | None`` parses as int; a bool is a switch; str needs none.
    value_type = next(t for t in (*typing.get_args(hint), hint) if t is not type(None))
    if value_type is bool:
        options["action"] = "store_true"
    elif value_type is not str:
        options["type"] = value_type
    group.add_argument(option, dest=field.name, **options)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m training.trainer.pretrain",
        description=DESCRIPTION,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    for title, cls in _group_types().items():
        group = p.add_argument_group(title, cls.__doc__)
        hints = typing.get_type_hints(cls)
        for field in dataclasses.fields(cls):
            _add_flag(group, field, hints[field.name])
    return p


def parse_args(argv: list[str] | None = None) -> PretrainArgs:
    p = build_parser()
    ns = p.parse_args(argv)
    check_args(p, ns)
    return PretrainArgs.from_flags(resolved_flags(ns))


def check_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``p.error`` for the first rule between flags that ``args`` (parsed by ``p``) breaks."""
    positive = (
        "batch_size",
        "grad_accum_usteps",
        "max_steps",
        "seq_len",
        "max_pred_len",
        "checkpoint_every",
        "keep_checkpoints",
    )
    for name in positive:
        if getattr(args, name) < 1:
            p.error(f"--{name} must be >= 1")
    if args.eval_every < 0 or args.eval_samples < 1:
        p.error("--eval_every must be >= 0 (0: after the last step only), --eval_samples >= 1")
    if args.steps_this_run is not None and args.steps_this_run < 1:
        p.error("--steps_this_run must be >= 1")
    if not 0 <= args.warmup_steps <= args.max_steps:
        p.error("--warmup_steps must be between 0 and --max_steps")
    if args.lr <= 0 or args.max_grad_norm <= 0 or args.weight_decay < 0:
        p.error("--lr and --max_grad_norm must be > 0, --weight_decay >= 0")
    if args.log_every < 0:
        p.error(f"--log_every {args.log_every}: must be >= 0 (0 picks the device's default)")
    if not 0 <= args.metrics_port <= 65535:
        p.error(f"--metrics_port {args.metrics_port}: use 1-65535, or 0 for no metrics endpoint")
    if args.num_workers not in (0, 1):
        p.error("--num_workers must be 0 or 1")
    if args.seq_len > 512 or args.max_pred_len > args.seq_len:
        p.error("--seq_len must be <= 512 (position embeddings) and >= --max_pred_len")
    if args.hang_floor_s < 0 or args.hang_factor < 1 or args.hang_warmup_steps < 0:
        p.error("--hang_floor_s and --hang_warmup_steps must be >= 0, --hang_factor >= 1")
    if args.collective_timeout_s <= args.hang_floor_s:
        p.error(
            f"--collective_timeout_s {args.collective_timeout_s:g} must be above --hang_floor_s "
            f"{args.hang_floor_s:g}: a collective would raise before the watchdog names the hang"
        )


def resolved_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The flags of ``args`` with the defaults that follow other flags filled in."""
    flags = dict(vars(args))
    out = Path(args.output_dir)
    if flags["steps_this_run"] is None:
        flags["steps_this_run"] = args.max_steps
    flags["tensorboard_dir"] = args.tensorboard_dir or str(out / "tensorboard")
    flags["metrics_file"] = args.metrics_file or str(out / "metrics.json")
    flags["step_log"] = args.step_log or str(out / "train_log.jsonl")
    # neuron_parallel_compile sets this in its trial run: never checkpoint stub outputs.
    if os.environ.get("NEURON_EXTRACT_GRAPHS_ONLY"):
        flags["precompile"] = True
    return flags
