"""Export of a run stopped before the end of its schedule, and the card's flags."""

from __future__ import annotations

import json

import pytest
import torch
from huggingface_hub import ModelCard
from transformers import BertForPreTraining

from tests.training.conftest import run_module, sigterm_during, tiny_args
from training.trainer import checkpoint as ckpt
from training.trainer import pretrain
from training.trainer.export import ExportError, export
from training.trainer.model_card import CardOptions
from training.trainer.stop import Stopped
from trainium_job.paths import COMPLETE_MARKER


def test_given_a_run_stopped_mid_schedule_then_its_newest_checkpoint_exports_and_the_card_says_so(
    shards, held_out, tmp_path, monkeypatch
):
    # Given a 6-step run (checkpoints every 2 steps, evaluations every 2) stopped by SIGTERM at step 3
    out = tmp_path / "run"
    args = (
        "--max_steps",
        "6",
        "--checkpoint_every",
        "2",
        "--eval_dir",
        str(held_out.dir),
        "--eval_every",
        "2",
    )
    sigterm_during(monkeypatch, 3)
    with pytest.raises(Stopped):
        pretrain.train(pretrain.parse_args(tiny_args(shards, out, *args, "--eval_samples", "16")))
    assert [s for s, _ in ckpt.step_dirs(ckpt.checkpoint_root(out))] == [2, 3]
    assert not (out / COMPLETE_MARKER).exists() and not (out / "metrics.json").exists()
    # When its run directory is exported, as the pod program does when a spend ceiling stops a phase
    hf = tmp_path / "model"
    done = run_module("training.trainer.export", str(out), str(hf), "--vocab", str(shards.vocab))
    assert done.returncode == 0, done.stderr
    # Then the folder holds step 3's weights, which transformers loads
    model, info = BertForPreTraining.from_pretrained(hf, output_loading_info=True)
    assert {k: v for k, v in info.items() if v} == {}
    saved = ckpt.load_state(ckpt.checkpoint_root(out) / "step_00000003")["model"]
    assert all(torch.equal(model.state_dict()[k], v.float()) for k, v in saved.items())
    # And its card says it stopped at step 3 of 6, claims no result at step 3, and shows step 2's
    card = ModelCard.load(hf / "README.md")
    assert "**The run stopped at step 3 of 6**, before the end of its schedule" in card.text
    assert "| steps | 3 of 6 (stopped before the end of its schedule) |" in card.text
    assert card.data.eval_results is None and card.data.metrics is None
    logged = [json.loads(x) for x in (out / "train_log.jsonl").read_text().splitlines()]
    (at2,) = [r for r in logged if "eval_mlm_accuracy" in r]
    assert at2["step"] == 2
    row = f"| phase 1 | 2 | `{held_out.dir.name}` | 16 | {at2['eval_mlm_loss']:.4f} | {at2['eval_mlm_accuracy']:.4f} |"
    assert row in card.text and "step log: the last evaluation at or before step 3" in card.text
    # And an older checkpoint of it, exported by its directory, is said to be that and not the newest
    older = export(str(ckpt.checkpoint_root(out) / "step_00000002"), tmp_path / "older", vocab=shards.vocab)
    text = (older / "README.md").read_text()
    assert "**This is the checkpoint of step 2 of 6**, not the run's newest (step 3)" in text


def test_given_card_flags_it_cannot_hold_then_refused_naming_the_flag(tmp_path):
    done = run_module(
        "training.trainer.export", str(tmp_path), str(tmp_path / "m"), "--vocab", "v", "--node_hours", "-1"
    )
    assert done.returncode == 2 and "--node_hours -1.0: give the run's node-hours" in done.stderr
    with pytest.raises(ExportError, match="--hardware '2 x\\\\ntrn1': give one line"):
        export(str(tmp_path), tmp_path / "m", vocab=tmp_path / "v", card=CardOptions(hardware="2 x\ntrn1"))
    with pytest.raises(ExportError, match="--license 'apache 2': give one identifier"):
        export(str(tmp_path), tmp_path / "m", vocab=tmp_path / "v", card=CardOptions(license="apache 2"))
    assert not (tmp_path / "m").exists()
