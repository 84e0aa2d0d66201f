"""Fixtures of the XLA tests: torch-xla's CPU runtime (PJRT_DEVICE=CPU), run by ``make test-xla``.

These run in ``.venv-xla`` (torch + torch-xla, no aws-cdk-lib), with ``--confcutdir=tests/xla``
so that ``tests/conftest.py`` (CDK fixtures) is not loaded. The shards come from the same
fixture as the CPU tests: ``python -m training.dataprep.prepare_data`` on a synthetic corpus.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.training.conftest import PYTHON, REPO, child_env, free_port, shards  # noqa: F401 (fixture)
from tests.training.conftest import tiny_args as cpu_tiny_args
from training.dataprep.synthetic import SyntheticShards

# Compile time dominates these tests (XLA:CPU's LLVM backend, ~20 s a graph on a busy 2-core
# machine). Optimisation level 0 compiles ~3x faster; these tests check graphs, transfers and
# numerics of the training code, not XLA:CPU's code quality. Set before the runtime starts.
os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0")


@pytest.fixture(scope="session", autouse=True)
def pjrt_cpu() -> None:
    if os.environ.get("PJRT_DEVICE") != "CPU":
        pytest.fail(
            "the XLA tests run on torch-xla's CPU runtime: PJRT_DEVICE=CPU (make test-xla)", pytrace=False
        )
    import torch_xla

    # Start the runtime before any CPU backward in this process: autograd sizes its
    # per-device queues when it first runs, and an XLA device added later fails its assert.
    torch_xla.device()


def tiny_args(data: SyntheticShards, out: Path, *extra: str) -> list[str]:
    """The CPU tests' tiny run, on the XLA device (extra flags override earlier ones)."""
    return cpu_tiny_args(data, out, "--device", "xla", *extra)


def run_pretrain(args: list[str], timeout: int = 300, **env: str) -> subprocess.CompletedProcess:
    """``python -m training.trainer.pretrain ARGS`` in a fresh process; fails with its output's tail."""
    proc = subprocess.run(
        [PYTHON, "-m", "training.trainer.pretrain", *args],
        cwd=REPO,
        env=child_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def run_probe(out_json: Path, args: list[str], timeout: int = 400) -> dict:
    """pretrain under ``python -m bench.xla_graph_probe`` (per-step counters) in a fresh process."""
    proc = subprocess.run(
        [PYTHON, "-m", "bench.xla_graph_probe", str(out_json), "--", *args],
        cwd=REPO,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out_json.read_text())


def step_log(out: Path) -> list[dict]:
    """The records of ``<out>/train_log.jsonl``, in order."""
    return [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
