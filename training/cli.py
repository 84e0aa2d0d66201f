"""The command line of ``python -m training.pretrain``, importable without torch.

The CDK app checks ``training_script_args`` against this parser at synth, and the TorchX
component renders flags from it, so it must load without torch, transformers or torch-xla. The
choice tuples live here for the same reason; the modules that implement them re-export them.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from trainium_job.launch import PRECOMPILE_FLAG

DEVICES = ("auto", "xla", "cuda", "cpu")
PRECISIONS = ("auto", "fp32", "bf16", "amp_bf16")
OPTIMIZERS = ("adamw", "lamb")
MODEL_NAMES = ("large", "base", "tiny")
MLM_HEADS = ("sparse", "dense")
DESCRIPTION = """BERT phase-1 pretraining (one process per device; run it under torchrun).

Reads rank/world from torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK) and resumes by
itself from the newest complete checkpoint in --output_dir. The reference script's flag names
and defaults are kept."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m training.pretrain",
        description=DESCRIPTION,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    a = p.add_argument
    # The reference script's flags, with its defaults.
    a(
        "--data_dir",
        required=True,
        help="a shard set (directory with manifest.json, see training.shard_format) or one HDF5 "
        "file, such as the reference data tool's --output_file",
    )
    a("--output_dir", default="./output", help="checkpoints, logs, metrics (shared by all nodes)")
    a("--batch_size", type=int, default=16, help="micro-batch per worker")
    a("--grad_accum_usteps", type=int, default=32, help="micro-batches per optimizer step")
    a("--max_steps", type=int, default=28125, help="optimizer steps of the whole schedule")
    a("--steps_this_run", type=int, default=None, help="stop after this many steps (default: max_steps)")
    a("--lr", type=float, default=4e-4, help="peak learning rate")
    a("--warmup_steps", type=int, default=2000)
    a("--seq_len", type=int, default=128)
    a("--max_pred_len", type=int, default=20)
    a("--optimizer", choices=OPTIMIZERS, default="adamw")
    a("--seed", type=int, default=12349)
    a(
        "--resume_ckpt",
        nargs="?",
        const="auto",
        default="auto",
        help="'auto' (default, also the bare flag): newest complete checkpoint in output_dir; "
        "or a checkpoint directory, used unless output_dir holds a newer one",
    )
    # Ours.
    a("--model", choices=MODEL_NAMES, default="large", help="model_configs/<name>.json")
    a("--vocab_size", type=int, default=None, help="override the config's vocabulary size")
    a(
        "--mlm_head",
        choices=MLM_HEADS,
        default="sparse",
        help="sparse: LM head on the masked positions only; dense: Hugging Face's forward",
    )
    a("--checkpoint_every", type=int, default=200, help="optimizer steps between checkpoints")
    a("--keep_checkpoints", type=int, default=3)
    a("--weight_decay", type=float, default=0.01)
    a("--max_grad_norm", type=float, default=1.0)
    a("--device", choices=DEVICES, default="auto")
    a(
        "--precision",
        choices=PRECISIONS,
        default="auto",
        help="auto: xla->bf16 (+stochastic rounding), cuda->amp_bf16, cpu->fp32",
    )
    a(
        "--fp32_master_weights",
        action="store_true",
        help="with bf16: optimizer updates fp32 copies (no stochastic rounding)",
    )
    a("--num_workers", type=int, default=0, help="loader processes: 0 or 1")
    a("--tensorboard_dir", default=None, help="default: <output_dir>/tensorboard")
    a("--metrics_file", default=None, help="final JSON metrics; default: <output_dir>/metrics.json")
    a("--step_log", default=None, help="per-step JSONL; default: <output_dir>/train_log.jsonl")
    a(
        "--log_every",
        type=int,
        default=0,
        help="optimizer steps between log lines (and the last step); 0: 10 on xla, else 1",
    )
    a("--peak_tflops", type=float, default=None, help="device BF16 peak for MFU (overrides the table)")
    a(
        PRECOMPILE_FLAG,
        action="store_true",
        help="neuron_parallel_compile trial run: write no checkpoint, metrics or TensorBoard",
    )
    a(
        "--debug",
        action="store_true",
        help="show the traceback of input errors (by default: one line and exit code 2)",
    )
    a(
        "--param_digest",
        action="store_true",
        help="debug: each rank writes a hash of its final weights to <output_dir>/param_digest/",
    )
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = build_parser()
    args = p.parse_args(argv)
    _validate(p, args)
    return args


def _validate(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
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
    if args.steps_this_run is None:
        args.steps_this_run = args.max_steps
    if args.steps_this_run < 1:
        p.error("--steps_this_run must be >= 1")
    if not 0 <= args.warmup_steps <= args.max_steps:
        p.error("--warmup_steps must be between 0 and --max_steps")
    if args.lr <= 0 or args.max_grad_norm <= 0 or args.weight_decay < 0:
        p.error("--lr and --max_grad_norm must be > 0, --weight_decay >= 0")
    if args.log_every < 0:
        p.error(f"--log_every {args.log_every}: must be >= 0 (0 picks the device's default)")
    if args.num_workers not in (0, 1):
        p.error("--num_workers must be 0 or 1")
    if args.seq_len > 512 or args.max_pred_len > args.seq_len:
        p.error("--seq_len must be <= 512 (position embeddings) and >= --max_pred_len")
    out = Path(args.output_dir)
    args.tensorboard_dir = args.tensorboard_dir or str(out / "tensorboard")
    args.metrics_file = args.metrics_file or str(out / "metrics.json")
    args.step_log = args.step_log or str(out / "train_log.jsonl")
    # neuron_parallel_compile sets this in its trial run: never checkpoint stub outputs.
    if os.environ.get("NEURON_EXTRACT_GRAPHS_ONLY"):
        args.precompile = True
