"""``training.trainer.pretrain --device xla`` on torch-xla's CPU runtime: fp32 losses, precompile mode.

bf16 (the XLA default) training is checked in test_graphs_xla.py, on the graph probe's run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import training.trainer.model
from tests.xla.conftest import run_pretrain, step_log, tiny_args
from training.trainer import checkpoint as ckpt
from training.trainer.pretrain import parse_args, train

# |loss_xla - loss_cpu| over 8 fp32 steps measured here: at most 9.5e-7 (2 ulp at loss ~6.5).
FP32_LOSS_ATOL = 5e-6


@pytest.fixture
def no_dropout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tiny config with dropout off: XLA's and the CPU's random streams differ."""
    configs = tmp_path / "model_configs"
    configs.mkdir()
    config = json.loads((training.trainer.model.CONFIG_DIR / "tiny.json").read_text())
    config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    (configs / "tiny.json").write_text(json.dumps(config))
    monkeypatch.setattr(training.trainer.model, "CONFIG_DIR", configs)


def test_given_fp32_when_trained_on_xla_then_losses_match_cpu_eager(shards, tmp_path, no_dropout):
    common = ("--precision", "fp32", "--log_every", "1")
    train(parse_args(tiny_args(shards, tmp_path / "xla", *common)))
    train(parse_args(tiny_args(shards, tmp_path / "cpu", *common, "--device", "cpu")))
    xla, cpu = step_log(tmp_path / "xla"), step_log(tmp_path / "cpu")
    assert [r["step"] for r in xla] == [r["step"] for r in cpu] == list(range(1, 9))
    diffs = [abs(a["loss"] - b["loss"]) for a, b in zip(xla, cpu, strict=True)]
    print("fp32 |loss xla - loss cpu| per step:", [f"{d:.2e}" for d in diffs])
    assert max(diffs) <= FP32_LOSS_ATOL, diffs
    # Same updates, not merely similar starts: the last step's loss moved well away from the first.
    assert cpu[0]["loss"] - cpu[-1]["loss"] > 50 * FP32_LOSS_ATOL


def test_given_neuron_precompile_env_then_no_checkpoint_metrics_or_logs_to_resume_from(shards, tmp_path):
    # neuron_parallel_compile runs the command with NEURON_EXTRACT_GRAPHS_ONLY set (Neuron docs,
    # "PyTorch Neuron Environment Variables"): graphs are extracted, outputs are stubs (zeros).
    out = tmp_path / "run"
    run_pretrain(
        tiny_args(shards, out, "--steps_this_run", "3", "--checkpoint_every", "1", "--param_digest"),
        NEURON_EXTRACT_GRAPHS_ONLY="1",
    )
    # The real run resumes from the newest complete checkpoint: there is none, so it starts at 0.
    assert ckpt.newest_complete(out / "checkpoints") is None
    for name in ("metrics.json", "train_log.jsonl", "tensorboard", "param_digest"):
        assert not (out / name).exists(), name
