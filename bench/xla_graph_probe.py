"""Run ``training.trainer.pretrain`` on XLA and record torch-xla's counters around every optimizer step.

    PJRT_DEVICE=CPU .venv-xla/bin/python -m bench.xla_graph_probe OUT.json -- <pretrain flags>

Writes ``OUT.json``: the run's summary (``train``'s return value) and, per optimizer step,
the counters just before and just after ``training.trainer.step.optimizer_step``:

* ``compiles``: CompileTime samples (one per graph compiled: a new graph, or a cache miss);
* ``compile_s``: CompileTime seconds so far;
* ``transfers``: TransferFromDeviceTime samples (device-to-host copies: ``.item()``,
  ``.cpu()``, a Python branch on a device tensor);
* ``executions``: ExecuteComputation (graphs run; counted when a run completes, so it lags);
* ``time``: ``time.perf_counter()`` (seconds).

With ``--device cpu`` the counters stay 0 and only ``time`` means something (the eager baseline).

``evaluations`` holds the same counters around each held-out evaluation (``--eval_dir``), with
the step it followed. What else happens between two steps (a checkpoint save, for one) falls
between one step's ``after`` and the next one's ``before``. Run it in a fresh process: torch-xla's counters and
its in-memory graph cache are per process. Used by ``python -m bench.bench_xla`` and ``tests/xla``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch_xla.debug.metrics as met

import training.trainer.pretrain as pretrain
from training.trainer.cli import parse_args


def counters() -> dict[str, float]:
    compile_data = met.metric_data("CompileTime")
    transfer_data = met.metric_data("TransferFromDeviceTime")
    return {
        "compiles": compile_data[0] if compile_data else 0,
        "compile_s": compile_data[1] / 1e9 if compile_data else 0.0,  # accumulator is in ns
        "transfers": transfer_data[0] if transfer_data else 0,
        "executions": met.counter_value("ExecuteComputation") or 0,
        "time": time.perf_counter(),
    }


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] != "--":
        print(__doc__, file=sys.stderr)
        return 2
    out, flags = Path(argv[0]), argv[2:]
    steps: list[dict] = []
    step_fn = pretrain.optimizer_step

    def probed(*args, **kwargs):
        before = counters()
        result = step_fn(*args, **kwargs)
        steps.append({"before": before, "after": counters()})
        return result

    evaluations: list[dict] = []
    evaluate_fn = pretrain.evaluate

    def probed_evaluation(run, reporter):
        before = counters()
        evaluate_fn(run, reporter)
        evaluations.append({"step": run.step, "before": before, "after": counters()})

    pretrain.optimizer_step = probed  # pretrain's loop looks the names up at each step
    pretrain.evaluate = probed_evaluation
    t0 = time.perf_counter()
    summary = pretrain.train(parse_args(flags))
    record = {
        "summary": summary,
        "wall_s": time.perf_counter() - t0,
        "steps": steps,
        "evaluations": evaluations,
        "end": counters(),
    }
    out.write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
