"""Held-out evaluation (``--eval_dir``): what it computes, where it is reported, what it refuses."""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.training.conftest import sigterm_during, tiny_args
from training.dataprep.shard_format import read_manifest, write_manifest
from training.trainer import checkpoint as ckpt
from training.trainer.data import IGNORE_INDEX, ShardStream, list_shards
from training.trainer.evaluate import EvalResult, result_of
from training.trainer.model import additive_attention_mask, build_model
from training.trainer.preflight import PreflightError
from training.trainer.pretrain import parse_args, train
from training.trainer.stop import Stopped


def test_given_a_batch_then_eval_sums_are_the_losses_and_hits_of_the_full_logits(held_out):
    # Given a tiny model and a held-out batch with padding in its masked positions
    torch.manual_seed(0)
    module = build_model("tiny", vocab_size=held_out.vocab_size).eval()
    batch = next(
        iter(ShardStream(list_shards(str(held_out.dir)), batch_size=4, seq_len=128, max_pred_len=20))
    )
    targets = batch["mlm_targets"]
    assert (targets == IGNORE_INDEX).any()
    # An untrained model hits no target: make it predict the commonest one, so hits count
    common = targets[targets != IGNORE_INDEX].mode().values.item()
    module.hf_model.cls.predictions.bias.data[common] += 10.0
    # When it is evaluated
    with torch.no_grad():
        loss_sum, mlm_correct, masked, nsp_correct = module.eval_sums(batch).tolist()
        training_loss = module(batch).item()
        out = module.hf_model(
            input_ids=batch["input_ids"],
            attention_mask=additive_attention_mask(batch["attention_mask"], torch.float32),
            token_type_ids=batch["token_type_ids"],
        )
    # Then the sums are those of Hugging Face's dense logits at the masked positions
    valid = targets != IGNORE_INDEX
    rows = torch.arange(4)[:, None].expand_as(targets)
    picked = out.prediction_logits[rows, batch["mlm_positions"]]  # [B, P, V]
    assert masked == valid.sum().item() and mlm_correct > 0
    assert mlm_correct == ((picked.argmax(-1) == targets) & valid).sum().item()
    assert (
        nsp_correct == (out.seq_relationship_logits.argmax(-1) == batch["next_sentence_label"]).sum().item()
    )
    nsp_loss = F.cross_entropy(out.seq_relationship_logits, batch["next_sentence_label"]).item()
    # And the masked-LM mean is the one the training loss is made of
    assert loss_sum / masked + nsp_loss == pytest.approx(training_loss, rel=1e-5)


def training_losses(out: Path) -> list[float]:
    return [
        r["loss"] for r in map(json.loads, (out / "train_log.jsonl").read_text().splitlines()) if "loss" in r
    ]


def eval_records(out: Path) -> list[dict]:
    lines = [json.loads(x) for x in (out / "train_log.jsonl").read_text().splitlines()]
    return [r for r in lines if "eval_mlm_loss" in r]


def test_given_eval_dir_then_evaluated_every_n_steps_and_at_the_end_everywhere(shards, held_out, tmp_path):
    # Given a 5-step run that evaluates 16 held-out samples every 2 steps
    out = tmp_path / "run"
    args = tiny_args(
        shards,
        out,
        "--max_steps",
        "5",
        "--eval_dir",
        str(held_out.dir),
        "--eval_every",
        "2",
        "--eval_samples",
        "18",
    )
    result = train(parse_args(args))
    # Then steps 2, 4 and the last (5) are evaluated on whole batches (18 -> 16 samples)
    records = eval_records(out)
    assert [r["step"] for r in records] == [2, 4, 5]
    for r in records:
        assert r["eval_samples"] == 16
        assert 0 <= r["eval_mlm_accuracy"] <= 1 and 0 <= r["eval_nsp_accuracy"] <= 1
        assert math.isfinite(r["eval_mlm_loss"]) and r["eval_mlm_loss"] > 0
    # And the metrics file holds the last, TensorBoard all three
    last = records[-1]
    assert result["eval"] == {
        "step": 5,
        "samples": 16,
        "mlm_loss": last["eval_mlm_loss"],
        "mlm_accuracy": last["eval_mlm_accuracy"],
        "nsp_accuracy": last["eval_nsp_accuracy"],
    }
    assert json.loads((out / "metrics.json").read_text())["eval"] == result["eval"]
    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("eval/mlm_accuracy")] == [2, 4, 5]
    assert [e.value for e in events.Scalars("eval/mlm_loss")] == pytest.approx(
        [r["eval_mlm_loss"] for r in records]
    )
    # And evaluating changed nothing of the training: same losses as a run without it
    plain = tmp_path / "plain"
    train(parse_args(tiny_args(shards, plain, "--max_steps", "5")))
    assert training_losses(out) == training_losses(plain)


def test_given_eval_set_that_is_trained_on_or_too_small_then_refused_before_the_first_step(
    shards, held_out, tmp_path
):
    out = tmp_path / "run"
    # Given the training set itself as the held-out set
    with pytest.raises(PreflightError, match=r"--eval_dir .*: .*_training_.*\.hdf5 is also a training shard"):
        train(parse_args(tiny_args(shards, out, "--eval_dir", str(shards.dir))))
    # Given more samples asked for than the set holds, or less than one global batch
    with pytest.raises(PreflightError, match=r"--eval_samples 100000: --eval_dir .* holds \d+; lower it"):
        train(parse_args(tiny_args(shards, out, "--eval_dir", str(held_out.dir), "--eval_samples", "100000")))
    with pytest.raises(PreflightError, match=r"--eval_samples 3: below one global batch \(4\)"):
        train(parse_args(tiny_args(shards, out, "--eval_dir", str(held_out.dir), "--eval_samples", "3")))
    assert not (out / "train_log.jsonl").exists()


def test_given_the_ranks_mean_sums_then_ratios_and_sample_count_follow():
    # Given the all-reduced mean of 2 ranks' sums over 2 batches of 4 each
    result = result_of(7, [30.0, 6.0, 10.0, 3.0], batches=2, batch_size=4, world_size=2)
    # Then ratios of the means are those of the sums, and each rank's 8 samples count once per rank
    assert result == EvalResult(step=7, samples=16, mlm_loss=3.0, mlm_accuracy=0.6, nsp_accuracy=0.375)


def test_given_a_stop_during_a_step_that_evaluates_then_the_checkpoint_is_written_without_the_evaluation(
    shards, held_out, tmp_path, monkeypatch
):
    # Given a run evaluating every 2 steps, and a SIGTERM during step 2
    out = tmp_path / "run"
    sigterm_during(monkeypatch, 2)
    args = tiny_args(
        shards, out, "--eval_dir", str(held_out.dir), "--eval_every", "2", "--eval_samples", "16"
    )
    # When the step ends
    with pytest.raises(Stopped, match="stopped by SIGTERM after step 2"):
        train(parse_args(args))
    # Then step 2's checkpoint is written and step 2 is not evaluated: the grace period is the checkpoint's
    assert [s for s, _ in ckpt.step_dirs(ckpt.checkpoint_root(out))] == [2]
    assert eval_records(out) == []


def arrive_during(monkeypatch: pytest.MonkeyPatch, step: int, made: Path, where: Path) -> None:
    """The held-out set ``made`` published at ``where`` during optimizer step ``step`` of an
    in-process run, as its staging Job publishes one: whole, by a rename."""
    from training.trainer import pretrain

    real, done = pretrain.optimizer_step, []

    def stepping(*args, **kwargs):
        result = real(*args, **kwargs)
        done.append(1)
        if len(done) == step:
            shutil.copytree(made, where.with_name(where.name + ".partial"))
            os.rename(where.with_name(where.name + ".partial"), where)
        return result

    monkeypatch.setattr(pretrain, "optimizer_step", stepping)


def test_given_a_held_out_set_not_there_at_start_then_the_run_trains_and_evaluates_once_it_comes(
    shards, held_out, tmp_path, monkeypatch, caplog
):
    # Given a held-out set that is not there at start, and is published during step 3
    late = tmp_path / "datasets" / "wiki-heldout"
    late.parent.mkdir()
    arrive_during(monkeypatch, 3, held_out.dir, late)
    out = tmp_path / "run"
    args = tiny_args(
        shards, out, "--max_steps", "5", "--eval_dir", str(late), "--eval_every", "2", "--eval_samples", "16"
    )
    # When the run trains, evaluating every 2 steps
    with caplog.at_level(logging.INFO, logger="training.trainer.pretrain"):
        result = train(parse_args(args))
    # Then it said once at start that the set is not there, and step 2 was not evaluated
    assert caplog.text.count(f"--eval_dir {late}: not there yet") == 1
    # And it evaluates from the first evaluation step that finds it: 4, then the last
    assert [r["step"] for r in eval_records(out)] == [4, 5]
    assert f"held-out set {late} is there: evaluating from step 4 on" in caplog.text
    assert result["eval"]["step"] == 5 and result["eval"]["samples"] == 16
    # And the training is the one a run without evaluations trains
    plain = tmp_path / "plain"
    train(parse_args(tiny_args(shards, plain, "--max_steps", "5")))
    assert training_losses(out) == training_losses(plain)


def test_given_a_held_out_set_that_never_comes_then_the_run_ends_without_an_evaluation_saying_why(
    shards, tmp_path, caplog
):
    # Given a held-out set whose staging Job gave up (its failed marker beside where it would be)
    never = tmp_path / "wiki-heldout"
    (tmp_path / "wiki-heldout.staging-failed").write_text(
        json.dumps({"by": "heldout-0a1b2c3d", "reason": "attempt 3 of 3 exited 1: HTTP Error 404"})
    )
    out = tmp_path / "run"
    args = tiny_args(shards, out, "--max_steps", "3", "--eval_dir", str(never), "--eval_every", "1")
    # When the run trains
    with caplog.at_level(logging.INFO, logger="training.trainer.pretrain"):
        result = train(parse_args(args))
    # Then it ends with no evaluation, and its last step says why
    assert result["eval"] is None and eval_records(out) == []
    assert (
        f"no held-out evaluation after step 3: --eval_dir {never} is not there (its staging gave up: "
        "attempt 3 of 3 exited 1: HTTP Error 404)"
    ) in caplog.text


def test_given_a_held_out_set_that_comes_but_is_trained_on_then_refused_and_the_training_goes_on(
    shards, tmp_path, monkeypatch, caplog
):
    # Given the training set itself arriving as the held-out set during step 1
    late = tmp_path / "wiki-heldout"
    arrive_during(monkeypatch, 1, shards.dir, late)
    out = tmp_path / "run"
    args = tiny_args(shards, out, "--max_steps", "4", "--eval_dir", str(late), "--eval_every", "2")
    # When the run trains
    with caplog.at_level(logging.INFO, logger="training.trainer.pretrain"):
        result = train(parse_args(args))
    # Then the set is refused with pre-flight's reason, once, and the run ends unevaluated
    assert caplog.text.count("held-out set refused; no evaluation in this run: --eval_dir") == 1
    assert "is also a training shard of --data_dir" in caplog.text
    assert result["eval"] is None and result["end_step"] == 4


def test_given_a_held_out_set_of_another_vocabulary_then_refused_before_the_first_step(
    shards, held_out, tmp_path
):
    # Given the held-out set's manifest recording another vocab.txt than the shards'
    other = tmp_path / "other-vocab"
    shutil.copytree(held_out.dir, other)
    manifest = read_manifest(other)
    write_manifest(other, replace(manifest, settings={**manifest.settings, "vocab_sha256": "0" * 64}))
    # Then pre-flight refuses it, naming both digests
    with pytest.raises(
        PreflightError, match=r"--eval_dir .*other-vocab: made with another vocab.txt \(SHA-256 0{64}\)"
    ):
        train(parse_args(tiny_args(shards, tmp_path / "run", "--eval_dir", str(other))))
