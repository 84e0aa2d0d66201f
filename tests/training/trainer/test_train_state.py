"""A run's state in a checkpoint: the layout on disk, and checkpoints in it loaded back."""

from __future__ import annotations

import json
import random
from pathlib import Path

import torch

from training.trainer import checkpoint as ckpt
from training.trainer.data import DataPosition
from training.trainer.device import make_backend
from training.trainer.model import build_model
from training.trainer.resume import RESUME_FLAGS, RecordedRun
from training.trainer.step import StepState, make_step_state, optimizer_step
from training.trainer.train_state import recorded_run, restore_state, save_state

FLAGS = {name: f"value of {name}" for name in RESUME_FLAGS} | {"data_dir": "/shards", "debug": False}


def step_state(seed: int) -> StepState:
    torch.manual_seed(seed)
    module = build_model("tiny", vocab_size=100)
    return make_step_state(
        make_backend("cpu", 0, 0, 1),
        module,
        precision="fp32",
        optimizer="adamw",
        lr=1e-3,
        weight_decay=0.01,
        warmup_steps=1,
        max_steps=10,
        grad_accum=1,
        max_grad_norm=1.0,
    )


def batch() -> dict[str, torch.Tensor]:
    return {
        "input_ids": torch.randint(5, 100, (2, 16)),
        "token_type_ids": torch.zeros(2, 16, dtype=torch.int64),
        "attention_mask": torch.ones(2, 16, dtype=torch.int64),
        "mlm_positions": torch.tensor([[1, 2], [3, 0]]),
        "mlm_targets": torch.tensor([[7, 8], [9, -100]]),
        "labels": torch.full((2, 16), -100),
        "next_sentence_label": torch.tensor([0, 1]),
    }


def trained(seed: int = 1) -> StepState:
    """A state one optimizer step in (so the optimizer has moments to save)."""
    t = step_state(seed)
    optimizer_step(t, iter([batch()]))
    return t


def test_given_a_saved_state_then_its_files_hold_the_keys_earlier_versions_wrote(tmp_path):
    t = trained()
    path = save_state(tmp_path, 7, t, DataPosition(2, 3, 40), flags=FLAGS, num_shards=6, loss=5.5, keep=2)

    state = torch.load(path / ckpt.STATE_FILE, weights_only=False)
    assert set(state) == {"model", "optimizer", "scheduler", "step", "data_epoch", "model_config", "args"}
    assert state["step"] == 7 and state["data_epoch"] == 2 and state["args"] == FLAGS
    assert state["model_config"]["hidden_size"] == 64
    rank = torch.load(path / ckpt.rank_file(0), weights_only=False)
    assert set(rank) == {"data_position", "rng"} and rank["data_position"] == [2, 3, 40]
    assert set(rank["rng"]) == {"python", "numpy", "torch", "device"}
    meta = json.loads((path / ckpt.META_FILE).read_text())
    assert meta["args"] == {name: FLAGS[name] for name in RESUME_FLAGS}
    assert (meta["num_shards"], meta["loss"], meta["step"]) == (6, 5.5, 7)
    assert recorded_run(meta) == RecordedRun(meta["args"], 6, 5.5)


def write_earlier_layout(root: Path, t: StepState, rng: dict) -> Path:
    """A checkpoint as the training script wrote them before ``train_state`` (literal keys)."""
    return ckpt.save_checkpoint(
        root,
        4,
        ckpt.Comm(),
        rank_state={"data_position": [1, 2, 30], "rng": rng},
        global_state=lambda: {
            "model": t.module.hf_model.state_dict(),
            "optimizer": t.optimizer.state_dict(),
            "scheduler": t.scheduler.state_dict(),
            "step": 4,
            "data_epoch": 1,
            "model_config": t.module.hf_model.config.to_dict(),
            "args": {"data_dir": "/shards"},
        },
        keep=3,
        meta=lambda: {"args": {"lr": 1e-3}, "num_shards": 6, "loss": 6.25},
    )


def test_given_a_checkpoint_in_the_earlier_layout_then_restore_state_continues_it(tmp_path):
    saved = trained(seed=1)
    rng = ckpt.capture_rng_state()
    expected_draw = random.random()  # what the restored Python RNG draws next
    path = write_earlier_layout(tmp_path, saved, rng)
    fresh = step_state(seed=2)

    restored = restore_state(ckpt.load_checkpoint(path, 0, 1), fresh)

    assert (restored.step, restored.position, restored.rng_restored) == (4, DataPosition(1, 2, 30), True)
    assert random.random() == expected_draw
    for name, value in saved.module.hf_model.state_dict().items():
        assert torch.equal(fresh.module.hf_model.state_dict()[name], value), name
    assert (
        fresh.optimizer.state_dict()["state"][0]["step"] == saved.optimizer.state_dict()["state"][0]["step"]
    )
    assert fresh.scheduler.last_epoch == saved.scheduler.last_epoch == 1
    assert recorded_run(ckpt.read_meta(path)) == RecordedRun({"lr": 1e-3}, 6, 6.25)


def test_given_another_world_size_then_the_next_data_epoch_and_no_rng_restored(tmp_path):
    path = write_earlier_layout(tmp_path, trained(), ckpt.capture_rng_state())

    restored = restore_state(ckpt.load_checkpoint(path, 0, 2), step_state(seed=2))

    assert (restored.step, restored.position, restored.rng_restored) == (4, DataPosition(epoch=2), False)


def test_given_meta_without_run_keys_then_nothing_recorded():
    assert recorded_run({"step": 3, "world_size": 1}) == RecordedRun()
