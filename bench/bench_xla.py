"""The XLA path's graph figures, and XLA-on-CPU against eager CPU (informational).

    PJRT_DEVICE=CPU .venv-xla/bin/python -m bench.bench_xla              # tiny and base
    PJRT_DEVICE=CPU .venv-xla/bin/python -m bench.bench_xla --models tiny --rounds 3

For each model, ``rounds`` times in turn (XLA, then eager CPU, so machine noise hits both
alike), ``training.trainer.pretrain`` runs in a fresh process under ``python -m bench.xla_graph_probe`` on
shards made by ``training.dataprep.prepare_data`` from a synthetic corpus (``training.dataprep.synthetic``).
It prints, per model:

* graphs compiled in the run and XLA:CPU compile seconds per graph (Neuron's neuronx-cc is
  another compiler: the count carries over, the seconds do not);
* device-to-host transfers per optimizer step: at logging steps and at the others;
* steady-state steps/s (after the warm-up steps) on XLA:CPU and eager CPU, and their ratio.
  XLA:CPU is not Trainium: the ratio says what the lazy-tensor tracing costs on a CPU.

XLA_FLAGS passes through (e.g. ``--xla_backend_optimization_level=0``, which the tests use to
compile ~3x faster); the first line prints it. Median over rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from training.dataprep.synthetic import SMALL_SET_FLAGS, make_shards

REPO = Path(__file__).resolve().parents[1]


def probe(device: str, model: str, shards: Path, vocab: int, out: Path, a: argparse.Namespace) -> dict:
    flags = [
        "--data_dir",
        str(shards),
        "--output_dir",
        str(out / "run"),
        "--model",
        model,
        "--vocab_size",
        str(vocab),
        "--batch_size",
        str(a.batch_size),
        "--grad_accum_usteps",
        str(a.grad_accum),
        "--max_steps",
        str(a.steps),
        "--warmup_steps",
        "2",
        "--checkpoint_every",
        str(a.steps),
        "--log_every",
        str(a.log_every),
        "--device",
        device,
        "--seed",
        "1",
    ]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    subprocess.run(
        [sys.executable, "-m", "bench.xla_graph_probe", str(out / "probe.json"), "--", *flags],
        check=True,
        cwd=REPO,
        env=env,
        capture_output=True,
    )
    return json.loads((out / "probe.json").read_text())


def figures(xla: dict, cpu: dict, a: argparse.Namespace) -> dict:
    steady = range(a.warm_steps, a.steps)
    per_step = [s["after"]["transfers"] - s["before"]["transfers"] for s in xla["steps"]]
    logged = [n for n in range(1, a.steps + 1) if n % a.log_every == 0 or n == a.steps]

    def steps_per_s(run: dict) -> float:
        first, last = run["steps"][steady.start]["before"]["time"], run["steps"][-1]["after"]["time"]
        return len(steady) / (last - first)

    return {
        "graphs": xla["end"]["compiles"],
        "compile_s_per_graph": xla["end"]["compile_s"] / max(xla["end"]["compiles"], 1),
        "transfers_at_logging_steps": max(per_step[n - 1] for n in logged),
        "transfers_at_other_steps": max(
            (per_step[n - 1] for n in range(1, a.steps + 1) if n not in logged), default=0
        ),
        "compiles_after_warmup": xla["end"]["compiles"] - xla["steps"][a.warm_steps]["before"]["compiles"],
        "xla_steps_per_s": steps_per_s(xla),
        "cpu_steps_per_s": steps_per_s(cpu),
        "ratio": steps_per_s(xla) / steps_per_s(cpu),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=["tiny", "base"])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warm_steps", type=int, default=2, help="steps left out of steps/s (compiles)")
    p.add_argument("--batch_size", type=int, default=4)
    p.add_argument("--grad_accum", type=int, default=2)
    p.add_argument("--log_every", type=int, default=4)
    a = p.parse_args()
    if os.environ.get("PJRT_DEVICE") != "CPU":
        p.error("run with PJRT_DEVICE=CPU (torch-xla's CPU runtime)")
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"python {platform.python_version()}; micro-batch {a.batch_size} x accumulation "
        f"{a.grad_accum}, seq 128, {a.steps} steps ({a.warm_steps} warm-up), log every {a.log_every}; "
        f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        made = make_shards(tmp, n_docs=120, flags={**SMALL_SET_FLAGS, "num_shards": 4})  # the XLA tests' kind
        shards, vocab = made.dir, made.vocab_size
        for model in a.models:
            rows = []
            for r in range(a.rounds):
                runs = {
                    d: probe(d, model, shards, vocab, Path(tmp) / f"{model}-{d}-{r}", a)
                    for d in ("xla", "cpu")
                }
                rows.append(figures(runs["xla"], runs["cpu"], a))
            med = {k: statistics.median(row[k] for row in rows) for k in rows[0]}
            print(
                f"{model}: graphs {med['graphs']:.0f} (new after warm-up: {med['compiles_after_warmup']:.0f}), "
                f"{med['compile_s_per_graph']:.1f} s compile per graph (XLA:CPU); host transfers per step: "
                f"{med['transfers_at_logging_steps']:.0f} at logging steps, {med['transfers_at_other_steps']:.0f} "
                f"at others; steps/s XLA:CPU {med['xla_steps_per_s']:.3g}, eager CPU "
                f"{med['cpu_steps_per_s']:.3g}, ratio XLA/eager {med['ratio']:.2f} "
                f"(median of {a.rounds} rounds)",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
