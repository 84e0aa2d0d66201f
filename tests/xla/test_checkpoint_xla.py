"""Checkpoints on XLA: a killed run resumes to the same losses, and checkpoints move between devices."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch

from tests.xla.conftest import PYTHON, REPO, child_env, run_pretrain, step_log, tiny_args
from training.trainer import checkpoint as ckpt
from training.trainer.pretrain import parse_args, train

STEPS = 9
FLAGS = ("--max_steps", str(STEPS), "--checkpoint_every", "3", "--log_every", "1", "--param_digest")


@pytest.fixture(scope="module")
def straight(shards, tmp_path_factory) -> Path:
    """An uninterrupted XLA run (bf16, the XLA default) of 9 steps, checkpoints at 3, 6, 9."""
    out = tmp_path_factory.mktemp("straight") / "run"
    run_pretrain(tiny_args(shards, out, *FLAGS))
    return out


def all_tensors(obj) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in all_tensors(v)]
    if isinstance(obj, list | tuple):
        return [t for v in obj for t in all_tensors(v)]
    return []


def test_given_xla_run_killed_after_a_checkpoint_when_restarted_then_losses_equal_uninterrupted(
    shards, tmp_path, straight
):
    out = tmp_path / "killed"
    cmd = [PYTHON, "-m", "training.trainer.pretrain", *tiny_args(shards, out, *FLAGS)]
    proc = subprocess.Popen(
        cmd, cwd=REPO, env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    first = out / "checkpoints" / ckpt.step_dir_name(3)
    deadline = time.monotonic() + 300
    while not ckpt.is_complete(first):
        assert proc.poll() is None, "the run ended before its first checkpoint"
        assert time.monotonic() < deadline, "no checkpoint at step 3 within 300 s"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    steps, _ = zip(*ckpt.complete_checkpoints(out / "checkpoints"), strict=True)
    assert max(steps) < STEPS, "killed too late: the run had finished"

    run_pretrain(tiny_args(shards, out, *FLAGS))  # the same command again
    log = step_log(out)
    resumed_pid = log[-1]["pid"]
    resumed = [r for r in log if r["pid"] == resumed_pid]
    assert resumed[0]["step"] == max(steps) + 1 and resumed[-1]["step"] == STEPS
    expected = {r["step"]: r["loss"] for r in step_log(straight)}
    assert [(r["step"], r["loss"]) for r in resumed] == [(r["step"], expected[r["step"]]) for r in resumed]
    digest = lambda run: (run / "param_digest" / "rank_00000.txt").read_text()  # noqa: E731
    assert digest(out) == digest(straight)


def test_given_xla_checkpoint_then_it_holds_cpu_tensors_only_and_resumes_on_cpu(shards, tmp_path, straight):
    step6 = straight / "checkpoints" / ckpt.step_dir_name(6)
    for name in (ckpt.STATE_FILE, ckpt.rank_file(0)):
        state = torch.load(step6 / name, map_location=None, weights_only=False)  # no remapping
        devices = {t.device.type for t in all_tensors(state)}
        assert devices == {"cpu"}, (name, devices)
    loaded = torch.load(step6 / ckpt.STATE_FILE, weights_only=False)
    assert loaded["model"]["bert.embeddings.word_embeddings.weight"].dtype == torch.bfloat16
    result = train(
        parse_args(
            tiny_args(
                shards,
                tmp_path / "cpu",
                *FLAGS,
                "--device",
                "cpu",
                "--precision",
                "bf16",
                "--resume_ckpt",
                str(step6),
                "--steps_this_run",
                "2",
            )
        )
    )
    assert (result["device"], result["start_step"], result["end_step"]) == ("cpu", 6, 8)
    assert all(r["loss"] == r["loss"] and r["loss"] < 10 for r in step_log(tmp_path / "cpu"))


def test_given_cpu_checkpoint_then_xla_resumes_from_it(shards, tmp_path):
    cpu = tmp_path / "cpu"
    train(parse_args(tiny_args(shards, cpu, *FLAGS, "--device", "cpu", "--steps_this_run", "3")))
    step3 = cpu / "checkpoints" / ckpt.step_dir_name(3)
    assert ckpt.is_complete(step3)
    xla = tmp_path / "xla"
    result = train(
        parse_args(
            tiny_args(
                shards,
                xla,
                *FLAGS,
                "--precision",
                "fp32",
                "--resume_ckpt",
                str(step3),
                "--steps_this_run",
                "2",
            )
        )
    )
    assert (result["device"], result["start_step"], result["end_step"]) == ("xla", 3, 5)
    cpu_losses = [r["loss"] for r in step_log(cpu)]
    xla_losses = [r["loss"] for r in step_log(xla)]
    # Continues the CPU run's training (loss near where it was), not a fresh model (~6.7).
    assert abs(xla_losses[0] - cpu_losses[-1]) < 0.5 and xla_losses[0] < cpu_losses[0]
    saved = torch.load(xla / "checkpoints" / ckpt.step_dir_name(5) / ckpt.STATE_FILE, weights_only=False)
    assert {t.device.type for t in all_tensors(saved)} == {"cpu"}
