"""BERT-large phase 1 (bf16 autocast, seq 128) on one CUDA GPU: seq/s and MFU, one command.

    python -m bench.bench_gpu                   # on a machine with a CUDA GPU
    python -m bench.bench_gpu --dry-run         # anywhere: tiny model on CPU, checks the script

Times ``training.trainer.step.optimizer_step`` — the loop pretrain.py runs — with the CUDA backend
(bf16 autocast, fp32 weights, AdamW) on random shard-format batches already on the GPU, so
the number is the model step alone. MFU uses 12*L*H*S*(6H+S) FLOPs per sequence and the
GPU's dense BF16 peak (``training.trainer.metrics``). Published reference: NVIDIA's BERT on A100 80GB,
mixed precision, phase 1: 580 seq/s per GPU.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from bench.bench_step import random_shard
from training.trainer.data import make_batch
from training.trainer.device import make_backend, select_device
from training.trainer.metrics import mfu, model_flops_per_seq
from training.trainer.model import build_model
from training.trainer.step import make_step_state, optimizer_step


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="large", choices=["large", "base", "tiny"])
    p.add_argument("--batch_size", type=int, default=64, help="micro-batch (sequences)")
    p.add_argument("--grad_accum", type=int, default=4)
    p.add_argument("--steps", type=int, default=10, help="timed optimizer steps")
    p.add_argument("--warmup", type=int, default=3, help="untimed optimizer steps first")
    p.add_argument("--mlm_head", default="sparse", choices=["sparse", "dense"])
    p.add_argument("--peak_tflops", type=float, default=None, help="override the GPU's BF16 peak")
    p.add_argument("--json", help="also write the result here")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="no GPU needed: tiny model, 2 small steps on CPU, same code path",
    )
    args = p.parse_args(argv)
    if args.dry_run:
        args.model, args.batch_size, args.grad_accum, args.steps, args.warmup = "tiny", 4, 2, 2, 1
    return args


def run(args: argparse.Namespace) -> dict:
    if args.dry_run:
        device, precision = "cpu", "fp32"
    else:
        try:
            device = select_device("cuda")
        except RuntimeError as e:
            raise SystemExit(
                f"bench_gpu: {e}. Run it on a CUDA machine, or pass --dry-run to check it on CPU."
            ) from e
        precision = "amp_bf16"
    backend = make_backend(device, 0, 0, 1)
    torch.manual_seed(0)
    module = backend.prepare_model(build_model(args.model, mlm_head=args.mlm_head), precision)
    step_state = make_step_state(
        backend,
        module,
        precision=precision,
        optimizer="adamw",
        lr=1e-4,
        weight_decay=0.01,
        warmup_steps=1,
        max_steps=100_000,
        grad_accum=args.grad_accum,
        max_grad_norm=1.0,
    )
    module.train()
    shard = random_shard(args.batch_size * args.grad_accum, vocab=module.hf_model.config.vocab_size)
    host = [
        make_batch(shard, np.arange(i * args.batch_size, (i + 1) * args.batch_size))
        for i in range(args.grad_accum)
    ]
    on_device = [{k: v.to(backend.device) for k, v in b.items()} for b in host]

    def one_step() -> float:
        return optimizer_step(step_state, iter([dict(b) for b in on_device])).loss.item()

    for _ in range(args.warmup):
        one_step()
    backend.synchronize()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        loss = one_step()
    backend.synchronize()
    dt = time.perf_counter() - t0
    config = module.hf_model.config
    seq_per_s = args.steps * args.grad_accum * args.batch_size / dt
    flops = model_flops_per_seq(config.num_hidden_layers, config.hidden_size, 128)
    peak = args.peak_tflops * 1e12 if args.peak_tflops else backend.peak_flops()
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu (dry run)"
    result = {
        "device": name,
        "model": args.model,
        "precision": precision,
        "batch_size": args.batch_size,
        "grad_accum": args.grad_accum,
        "steps": args.steps,
        "seq_per_s": seq_per_s,
        "mfu": mfu(seq_per_s, flops, peak, 1),
        "peak_flops": peak,
        "model_flops_per_seq": flops,
        "final_loss": loss,
        "max_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None,
    }
    mfu_text = (
        f"{result['mfu']:.1%} of {peak / 1e12:.0f} TFLOP/s"
        if result["mfu"] is not None and peak is not None
        else "n/a (peak unknown)"
    )
    print(
        f"{name}: BERT-{args.model} seq 128 {precision}, batch {args.batch_size} x {args.grad_accum}: "
        f"{seq_per_s:.1f} seq/s, MFU {mfu_text}, loss {loss:.3f}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    run(parse_args())
