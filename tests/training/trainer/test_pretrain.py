"""The training script in one process: exact resume, clean stop, precompile mode, precisions."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch

from tests.training.conftest import PYTHON, REPO, child_env, tiny_args
from training.trainer import checkpoint as ckpt
from training.trainer.pretrain import parse_args, train


def args_for(shards, out: Path, *extra: str) -> list[str]:
    """The tiny run of these tests: checkpoints at 3 and 6 (and the end), two kept, weight digests."""
    return tiny_args(
        shards, out, "--checkpoint_every", "3", "--keep_checkpoints", "2", "--param_digest", *extra
    )


def run(shards, out: Path, *extra: str) -> dict | None:
    return train(parse_args(args_for(shards, out, *extra)))


def log_steps(out: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (out / "train_log.jsonl").read_text().splitlines()]


def digest(out: Path) -> str:
    return (out / "param_digest" / "rank_00000.txt").read_text()


def test_given_interrupted_run_then_resume_is_bit_exact_and_stops_cleanly(shards, tmp_path):
    straight, split = tmp_path / "straight", tmp_path / "split"
    full = run(shards, straight)
    assert log_steps(straight) == list(range(1, 9))
    assert full["end_step"] == 8 and full["steps_this_run"] == 8 and full["global_batch"] == 8
    assert (
        full["final_loss"] == json.loads((straight / "train_log.jsonl").read_text().splitlines()[-1])["loss"]
    )
    assert full["average_seq_per_s"] > 0 and full["peak_seq_per_s"] >= full["average_seq_per_s"]
    assert full["average_mfu"] is None  # CPU: no known peak
    assert json.loads((straight / "metrics.json").read_text()) == full
    # checkpoints every 3 steps + at the end, last 2 kept
    assert [s for s, _ in ckpt.complete_checkpoints(straight / "checkpoints")] == [6, 8]
    assert list((straight / "tensorboard").glob("events.out.tfevents.*"))

    first = run(shards, split, "--steps_this_run", "4")  # stops after 4, checkpoint at 4
    assert first["end_step"] == 4 and log_steps(split) == [1, 2, 3, 4]
    assert [s for s, _ in ckpt.complete_checkpoints(split / "checkpoints")] == [3, 4]
    second = run(shards, split)  # resumes from step 4 by itself
    assert second["start_step"] == 4 and second["end_step"] == 8
    assert log_steps(split) == [1, 2, 3, 4, 5, 6, 7, 8]
    # Same data order, dropout masks and optimizer state: identical weights and losses.
    assert digest(split) == digest(straight)
    losses = lambda out: [json.loads(x)["loss"] for x in (out / "train_log.jsonl").read_text().splitlines()]  # noqa: E731
    assert losses(split) == losses(straight)

    again = run(shards, split)  # already at max_steps: nothing to do, nothing broken
    assert again["steps_this_run"] == 0 and log_steps(split)[-1] == 8
    assert ckpt.newest_complete(split / "checkpoints").name == "step_00000008"


def test_given_resume_ckpt_path_then_used_unless_output_dir_has_newer(shards, tmp_path):
    src = tmp_path / "src"
    run(shards, src, "--steps_this_run", "3", "--max_steps", "6")
    step3 = src / "checkpoints" / "step_00000003"
    fresh = tmp_path / "fresh"
    result = run(shards, fresh, "--max_steps", "6", "--resume_ckpt", str(step3), "--steps_this_run", "1")
    assert result["start_step"] == 3 and result["end_step"] == 4
    # A restart with the same flags continues from fresh/step 4, not back at src/step 3.
    result = run(shards, fresh, "--max_steps", "6", "--resume_ckpt", str(step3), "--steps_this_run", "1")
    assert result["start_step"] == 4
    with pytest.raises(ckpt.CheckpointError, match="no such checkpoint directory"):
        run(shards, tmp_path / "x", "--resume_ckpt", str(tmp_path / "nowhere"))


def test_given_precompile_then_no_checkpoint_metrics_or_events(shards, tmp_path, monkeypatch):
    out = tmp_path / "pre"
    assert run(shards, out, "--precompile", "--steps_this_run", "3") is None
    assert not (out / "checkpoints").exists() and not (out / "metrics.json").exists()
    assert not (out / "tensorboard").exists() and not (out / "train_log.jsonl").exists()
    # neuron_parallel_compile's trial run sets this; the flag is then implied.
    monkeypatch.setenv("NEURON_EXTRACT_GRAPHS_ONLY", "1")
    assert parse_args(args_for(shards, out)).runtime.precompile is True


@pytest.mark.parametrize(("optimizer", "lr"), [("lamb", "0.05")])  # AdamW: fp32 tests above
def test_given_bf16_with_fp32_master_weights_then_trains_and_checkpoints_fp32(
    shards, tmp_path, optimizer, lr
):
    out = tmp_path / optimizer
    result = run(
        shards,
        out,
        "--precision",
        "bf16",
        "--fp32_master_weights",
        "--optimizer",
        optimizer,
        "--max_steps",
        "8",
        "--lr",
        lr,
    )
    assert result["precision"] == "bf16" and result["optimizer"] == optimizer
    losses = [json.loads(x)["loss"] for x in (out / "train_log.jsonl").read_text().splitlines()]
    assert len(losses) == 8 and all(torch.isfinite(torch.tensor(losses)))
    assert sum(losses[-3:]) < sum(losses[:3]) - 0.1  # it learns
    state = torch.load(out / "checkpoints" / "step_00000008" / "state.pt", weights_only=False)
    weights = state["model"]
    assert all(t.dtype == torch.float32 for k, t in weights.items() if t.is_floating_point())
    # The fp32 masters hold information a bf16 copy cannot: not all values are bf16-exact.
    w = weights["bert.encoder.layer.0.attention.self.query.weight"]
    assert not torch.equal(w, w.to(torch.bfloat16).float())


def test_given_bad_flags_then_usage_error():
    for bad in (["--num_workers", "2"], ["--warmup_steps", "10", "--max_steps", "5"], ["--batch_size", "0"]):
        with pytest.raises(SystemExit) as e:
            parse_args(["--data_dir", "x", *bad])
        assert e.value.code == 2
    args = parse_args(["--data_dir", "x"])
    optim, data = args.optim, args.data
    assert (
        optim.batch_size,
        optim.grad_accum_usteps,
        optim.max_steps,
        optim.steps_this_run,
        optim.lr,
        optim.warmup_steps,
        data.seq_len,
        data.max_pred_len,
        optim.optimizer,
        optim.weight_decay,
        optim.max_grad_norm,
        args.model.model,
        args.checkpoint.resume_ckpt,
    ) == (16, 32, 28125, 28125, 4e-4, 2000, 128, 20, "adamw", 0.01, 1.0, "large", "auto")
    bare = parse_args(["--data_dir", "x", "--resume_ckpt"])
    assert bare.checkpoint.resume_ckpt == "auto"  # reference's bare flag


def test_given_module_entry_point_then_runs_as_torchrun_would(shards, tmp_path):
    out = tmp_path / "cli"
    proc = subprocess.run(
        [
            PYTHON,
            "-m",
            "training.trainer.pretrain",
            *args_for(shards, out, "--max_steps", "2", "--num_workers", "1"),
        ],
        cwd=REPO,
        env=child_env(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "step 2 | loss" in proc.stdout
    assert json.loads((out / "metrics.json").read_text())["end_step"] == 2


def test_given_sigterm_mid_interval_then_that_step_is_checkpointed_and_exit_143(shards, tmp_path):
    import signal
    import time

    out = tmp_path / "stop"
    proc = subprocess.Popen(
        [
            PYTHON,
            "-m",
            "training.trainer.pretrain",
            *args_for(shards, out, "--max_steps", "500", "--checkpoint_every", "100"),
        ],
        cwd=REPO,
        env=child_env(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (out / "train_log.jsonl").exists() or len(log_steps(out)) < 3:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, stderr[-3000:]
    stopped_at = log_steps(out)[-1]
    assert 3 <= stopped_at < 100
    assert f"stopped by SIGTERM after step {stopped_at}; checkpoint step_{stopped_at:08d} holds it" in stderr
    assert [s for s, _ in ckpt.step_dirs(out / "checkpoints")] == [stopped_at]
    assert ckpt.verify(out / "checkpoints" / f"step_{stopped_at:08d}")["step"] == stopped_at
    assert not (out / "metrics.json").exists()  # the run is not finished
    resumed = run(shards, out, "--max_steps", "500", "--checkpoint_every", "100", "--steps_this_run", "1")
    assert resumed["start_step"] == stopped_at and log_steps(out)[-1] == stopped_at + 1
