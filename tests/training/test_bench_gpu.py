"""The GPU benchmark's non-CUDA logic: a clear refusal without CUDA, and a CPU dry run."""

from __future__ import annotations

import json
import subprocess

import torch

from tests.training.conftest import PYTHON, REPO, child_env

SCRIPT = ["-m", "bench.bench_gpu"]  # run from the repository root, as the README says


def test_given_no_cuda_then_bench_gpu_fails_with_a_clear_message():
    assert not torch.cuda.is_available()  # this test documents the CPU-only machine
    proc = subprocess.run(
        [PYTHON, *SCRIPT], cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode != 0
    assert "no CUDA device" in proc.stderr and "--dry-run" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_given_dry_run_then_same_step_code_reports_throughput(tmp_path):
    out = tmp_path / "r.json"
    proc = subprocess.run(
        [PYTHON, *SCRIPT, "--dry-run", "--json", str(out)],
        cwd=REPO,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["model"] == "tiny" and result["device"] == "cpu (dry run)"
    assert result["seq_per_s"] > 0 and result["mfu"] is None
    assert result["model_flops_per_seq"] == 12 * 2 * 64 * 128 * (6 * 64 + 128)
    assert "seq/s" in proc.stdout
