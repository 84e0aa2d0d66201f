"""Training-step throughput on CPU: our loop vs a plain Hugging Face loop, same batches, same run.

    .venv/bin/python -m bench.bench_step                      # tiny and base
    .venv/bin/python -m bench.bench_step --models base --rounds 3

Three loops over identical batches (built with ``training.trainer.data.make_batch`` from random
shard-format arrays), interleaved round by round so machine noise hits all alike:

* ``ours``: ``training.trainer.step.optimizer_step`` (the code pretrain.py runs), sparse MLM head;
* ``ours-dense``: the same loop with Hugging Face's dense MLM head (loop overhead alone);
* ``plain-hf``: ``BertForPreTraining(**inputs, labels=...)``, backward, clip, AdamW step.

Prints seq/s per loop (median and best round) and the ratios to plain-hf.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import statistics
import time

import numpy as np
import torch

from training.dataprep.shard_format import SHARD_FIELDS
from training.trainer.data import Shard, make_batch
from training.trainer.device import make_backend
from training.trainer.model import build_model
from training.trainer.step import make_step_state, optimizer_step

SEQ, PRED = 128, 20


def random_shard(n: int, vocab: int, seed: int = 0) -> Shard:
    """Shard-format arrays with realistic lengths and 15% masking."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(64, SEQ + 1, size=n)
    ids = np.zeros((n, SEQ), np.int32)
    mask = np.zeros((n, SEQ), np.int8)
    seg = np.zeros((n, SEQ), np.int8)
    pos = np.zeros((n, PRED), np.int32)
    mids = np.zeros((n, PRED), np.int32)
    for i, length in enumerate(lengths):
        ids[i, :length] = rng.integers(1000, vocab, size=length)
        mask[i, :length] = 1
        seg[i, length // 2 : length] = 1
        k = min(PRED, max(1, round(0.15 * length)))
        pos[i, :k] = np.sort(rng.choice(np.arange(1, length - 1), k, replace=False))
        mids[i, :k] = rng.integers(1000, vocab, size=k)
    arrays: dict[str, np.ndarray] = {
        "input_ids": ids,
        "input_mask": mask,
        "segment_ids": seg,
        "masked_lm_positions": pos,
        "masked_lm_ids": mids,
        "next_sentence_labels": rng.integers(0, 2, n).astype(np.int8),
    }
    # Stored dtypes from the format's one table, as the data tool writes them.
    return Shard(
        "<random>",
        {name: arrays[name].astype(dtype, copy=False) for name, (dtype, _) in SHARD_FIELDS.items()},
    )


def our_loop(model_name: str, mlm_head: str, accum: int, seed: int):
    torch.manual_seed(seed)
    backend = make_backend("cpu", 0, 0, 1)
    module = build_model(model_name, mlm_head=mlm_head)
    step_state = make_step_state(
        backend,
        module,
        precision="fp32",
        optimizer="adamw",
        lr=1e-4,
        weight_decay=0.01,
        warmup_steps=1,
        max_steps=10_000,
        grad_accum=accum,
        max_grad_norm=1.0,
    )
    module.train()

    def step(batches):
        out = optimizer_step(step_state, batches)
        return out.loss.item()

    return step


def plain_hf_loop(model_name: str, accum: int, seed: int):
    torch.manual_seed(seed)
    model = build_model(model_name).hf_model  # the same BertForPreTraining, HF's forward
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    model.train()

    def step(batches):
        total = 0.0
        for _ in range(accum):
            b = next(batches)
            out = model(
                input_ids=b["input_ids"],
                attention_mask=b["attention_mask"],
                token_type_ids=b["token_type_ids"],
                labels=b["labels"],
                next_sentence_label=b["next_sentence_label"],
            )
            (out.loss / accum).backward()
            total += out.loss.item() / accum
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return total

    return step


def bench_model(name: str, batch_size: int, accum: int, rounds: int, steps: int) -> dict[str, float]:
    shard = random_shard(batch_size * accum * 4, vocab=30522)
    batches = [make_batch(shard, np.arange(i * batch_size, (i + 1) * batch_size)) for i in range(accum * 4)]
    loops = {
        "ours": our_loop(name, "sparse", accum, 0),
        "ours-dense": our_loop(name, "dense", accum, 0),
        "plain-hf": plain_hf_loop(name, accum, 0),
    }
    results: dict[str, list[float]] = {k: [] for k in loops}
    for step in loops.values():  # warm-up: allocator, first-call overheads
        step(iter([dict(b) for b in batches[:accum]]))
    for _ in range(rounds):
        for name_, step in loops.items():
            stream = iter([dict(b) for b in itertools.islice(itertools.cycle(batches), steps * accum)])
            t0 = time.perf_counter()
            for _ in range(steps):
                step(stream)
            results[name_].append(steps * accum * batch_size / (time.perf_counter() - t0))
    # Median and best round: on a shared machine the best round is the least disturbed one.
    return {
        **{k: statistics.median(v) for k, v in results.items()},
        **{f"{k}:best": max(v) for k, v in results.items()},
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=["tiny", "base"])
    p.add_argument("--batch_size", type=int, default=8)
    p.add_argument("--grad_accum", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=3, help="optimizer steps per loop per round")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cpus, "
        f"torch {torch.__version__}, threads {torch.get_num_threads()}"
    )
    print(
        f"batch {args.batch_size} x accum {args.grad_accum}, seq {SEQ}, {args.rounds} rounds x {args.steps} steps"
    )
    for name in args.models:
        r = bench_model(name, args.batch_size, args.grad_accum, args.rounds, args.steps)
        for kind, suffix in (("median", ""), ("best", ":best")):
            ours, dense, plain = (r[k + suffix] for k in ("ours", "ours-dense", "plain-hf"))
            print(
                f"{name:5s} {kind:6s} ours {ours:8.2f} seq/s | ours-dense {dense:8.2f} seq/s | "
                f"plain-hf {plain:8.2f} seq/s | ours/plain {ours / plain:.2f}x | "
                f"ours-dense/plain {dense / plain:.2f}x",
                flush=True,
            )


if __name__ == "__main__":
    main()
