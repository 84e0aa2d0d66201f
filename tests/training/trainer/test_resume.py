"""Honest resume: changed flags applied or refused, the post-resume loss check, metrics.json
of a finished run kept, no duplicate TensorBoard steps after a resume."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.training.trainer.test_pretrain import args_for, log_steps, run
from training.dataprep.shard_format import manifest_for_existing, write_manifest
from training.trainer import checkpoint as ckpt
from training.trainer.optim import warmup_linear_decay
from training.trainer.pretrain import parse_args, train
from training.trainer.resume import (
    APPLIED,
    REFUSED,
    RESUME_FLAGS,
    STATELESS_FLAGS,
    RecordedRun,
    ResumeError,
    check_flags,
    check_resumed_loss,
)


def records(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "train_log.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def four_steps(shards, tmp_path_factory) -> Path:
    """A run stopped after 4 of 8 steps (lr 2e-3, warmup 2, wd 0.01, batch 4 x 2)."""
    out = tmp_path_factory.mktemp("resume") / "run"
    run(shards, out, "--steps_this_run", "4")
    return out


def copy_run(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_given_changed_schedule_and_optimizer_flags_then_applied_from_the_next_step(
    shards, four_steps, tmp_path, caplog
):
    out = copy_run(four_steps, tmp_path / "run")
    caplog.set_level(logging.INFO, logger="training.trainer.pretrain")
    result = run(
        shards,
        out,
        "--lr",
        "1e-3",
        "--max_steps",
        "10",
        "--warmup_steps",
        "3",
        "--weight_decay",
        "0.05",
        "--batch_size",
        "2",
        "--grad_accum_usteps",
        "3",
        "--steps_this_run",
        "1",
    )
    assert result["start_step"] == 4 and result["end_step"] == 5 and result["global_batch"] == 6
    # The update of step 5 used this run's peak LR and schedule (0-based update 4 of 10, warmup 3),
    # not the old LR the optimizer state carried.
    assert records(out)[-1]["step"] == 5
    assert records(out)[-1]["lr"] == pytest.approx(1e-3 * warmup_linear_decay(4, 3, 10), rel=1e-12)
    state = torch.load(out / "checkpoints" / "step_00000005" / "state.pt", weights_only=False)
    groups = state["optimizer"]["param_groups"]
    assert [g["weight_decay"] for g in groups] == [0.05, 0.0]
    assert [g["initial_lr"] for g in groups] == [1e-3, 1e-3] and state["scheduler"]["base_lrs"] == [
        1e-3,
        1e-3,
    ]
    assert [g["lr"] for g in groups] == pytest.approx([1e-3 * warmup_linear_decay(5, 3, 10)] * 2, rel=1e-12)
    meta = json.loads((out / "checkpoints" / "step_00000005" / "meta.json").read_text())
    assert meta["args"]["lr"] == 1e-3 and meta["args"]["max_steps"] == 10 and meta["num_shards"] == 6
    applied = [r.getMessage() for r in caplog.records if "applied" in r.getMessage()]
    for flag in ("lr", "max_steps", "warmup_steps", "weight_decay", "batch_size", "grad_accum_usteps"):
        assert any(m.startswith(f"--{flag} changed from ") for m in applied), (flag, applied)


REFUSALS = {
    "model": ("base", "tiny"),
    "vocab_size": ("500", "400"),
    "optimizer": ("lamb", "adamw"),
    "fp32_master_weights": (None, None),
    "seq_len": ("64", "128"),
    "max_pred_len": ("10", "20"),
    "seed": ("12", "11"),
}


@pytest.mark.parametrize("flag", list(REFUSALS))
def test_given_a_refused_flag_changed_then_one_line_error_before_any_step(shards, four_steps, flag):
    new, old = REFUSALS[flag]
    assert RESUME_FLAGS[flag][0] == REFUSED
    before = sorted(p.name for p in (four_steps / "checkpoints").iterdir())
    log_before = (four_steps / "train_log.jsonl").read_text()
    extra = [f"--{flag}"] if new is None else [f"--{flag}", new]
    with pytest.raises(ResumeError) as e:
        run(shards, four_steps, *extra)
    message = str(e.value)
    assert "\n" not in message and message.startswith(f"--{flag} ")
    assert f"checkpoint {four_steps / 'checkpoints' / 'step_00000004'}:" in message
    fix = f"resume without --{flag}" if old is None else f"resume with --{flag} {old}"
    assert message.endswith(f"; {fix} or use a new --output_dir")
    assert sorted(p.name for p in (four_steps / "checkpoints").iterdir()) == before
    assert (four_steps / "train_log.jsonl").read_text() == log_before


def test_given_fewer_shards_then_resume_refused(shards, four_steps, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for f in shards.files[:5]:
        shutil.copy(f, data)
    write_manifest(data, manifest_for_existing(data))  # a complete set, just a smaller one
    argv = args_for(shards, four_steps)
    argv[argv.index("--data_dir") + 1] = str(data)
    with pytest.raises(
        ResumeError, match=rf"^--data_dir {data} holds 5 shards, the run of checkpoint .* read 6: "
    ):
        train(parse_args(argv))


def test_given_every_flag_then_it_has_a_decision_or_holds_no_state():
    # A new flag fails here until it is given a resume decision or said to hold no state.
    assert {d for d, _ in RESUME_FLAGS.values()} == {APPLIED, REFUSED}
    from training.trainer.cli import build_parser

    dests = {a.dest for a in build_parser()._actions} - {"help"}
    assert set(RESUME_FLAGS) & set(STATELESS_FLAGS) == set()
    assert set(RESUME_FLAGS) | set(STATELESS_FLAGS) == dests


def damage_weights(path: Path, how: str) -> None:
    """Wrong weights that still verify: rewrite state.pt and record its new digest."""
    state = torch.load(path / "state.pt", weights_only=False)
    for t in state["model"].values():
        if t.is_floating_point():
            if how == "nan":
                t.fill_(float("nan"))
            else:
                t.mul_(100.0)
    digest = ckpt.write_file_durably(path / "state.pt", lambda f: torch.save(state, f))
    meta = json.loads((path / "meta.json").read_text())
    meta["files"]["state.pt"] = digest
    (path / "meta.json").write_text(json.dumps(meta))


@pytest.mark.parametrize(
    ("how", "pattern"),
    [
        (
            "scaled",
            r"^loss \S+ at step 5, the first after resuming from .*step_00000004, which recorded \S+: the "
            r"restored state is wrong; move that checkpoint out to fall back to an older one$",
        ),
        (
            "nan",
            r"^loss nan at step 5, the first after resuming from .*step_00000004: the restored state is wrong",
        ),
    ],
)
def test_given_verified_but_wrong_weights_then_first_step_after_resume_fails_loudly(
    shards, four_steps, tmp_path, how, pattern
):
    out = copy_run(four_steps, tmp_path / "run")
    damage_weights(out / "checkpoints" / "step_00000004", how)
    with pytest.raises(ResumeError, match=pattern):
        run(shards, out)
    assert [s for s, _ in ckpt.step_dirs(out / "checkpoints")] == [3, 4]  # nothing saved or pruned
    assert log_steps(out) == [1, 2, 3, 4]  # the bad step was not logged


def test_given_finished_run_rerun_then_metrics_json_kept(shards, tmp_path):
    out = tmp_path / "run"
    run(shards, out, "--max_steps", "3")
    before = (out / "metrics.json").read_bytes()
    again = run(shards, out, "--max_steps", "3")
    assert again["steps_this_run"] == 0
    assert (out / "metrics.json").read_bytes() == before
    assert json.loads(before)["end_step"] == 3 and json.loads(before)["steps_this_run"] == 3


def test_given_resume_after_steps_past_the_checkpoint_then_tensorboard_has_each_step_once(shards, tmp_path):
    out = tmp_path / "run"
    run(shards, out, "--steps_this_run", "5")  # checkpoints at 3 and 5
    shutil.rmtree(out / "checkpoints" / "step_00000005")  # as if killed before saving step 5
    run(shards, out)  # resumes from 3: steps 4 and 5 run again
    assert log_steps(out) == [1, 2, 3, 4, 5, 4, 5, 6, 7, 8]  # the JSONL keeps both attempts
    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    losses = events.Scalars("train/loss")
    assert [e.step for e in losses] == list(range(1, 9))
    second = {r["step"]: r["loss"] for r in records(out)[5:]}
    assert [e.value for e in losses[3:]] == pytest.approx([second[s] for s in range(4, 9)], rel=1e-6)


def test_given_training_docs_then_their_resume_table_is_the_modules():
    page = (Path(__file__).resolve().parents[3] / "docs" / "training.md").read_text()
    rows = [line for line in page.splitlines() if line.startswith("| `--")]
    table = {}
    for line in rows:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 3 and cells[1] in (APPLIED, REFUSED):
            table[cells[0].strip("`").removeprefix("--")] = (cells[1], cells[2])
    assert table == RESUME_FLAGS


#: A checkpoint's path as the checks name it, and the flags of the run that wrote it.
CHECKPOINT = Path("/fsx/run/checkpoints/step_00000004")
SAVED = {"lr": 2e-3, "model": "tiny", "fp32_master_weights": False, "seed": 11}


def flags(**changed: object) -> dict[str, object]:
    """This run's flags: the saved ones, ``changed``, and the rest of RESUME_FLAGS the checks read."""
    return {name: None for name in RESUME_FLAGS} | SAVED | {"data_dir": "/fsx/data"} | changed


def test_given_applied_changes_then_one_line_each_names_old_new_checkpoint_and_why():
    # Given a checkpoint that recorded four flags, and a run that changes an applied one
    recorded = RecordedRun(flags=SAVED, num_shards=6)
    # When the flags are checked
    applied = check_flags(recorded, flags(lr=1e-3), 6, CHECKPOINT)
    # Then the line names the flag, both values, the checkpoint's directory name and the reason
    assert applied == [
        f"--lr changed from 0.002 to 0.001 since checkpoint step_00000004: applied ({RESUME_FLAGS['lr'][1]})"
    ]
    # And a flag the checkpoint did not record (an older checkpoint) is not compared
    assert check_flags(recorded, flags(warmup_steps=7, max_pred_len=99), 6, CHECKPOINT) == []
    assert check_flags(RecordedRun(), flags(model="base"), 6, CHECKPOINT) == []


def test_given_a_refused_value_changed_then_the_message_names_both_values_and_the_fix():
    with pytest.raises(ResumeError) as e:
        check_flags(RecordedRun(flags=SAVED), flags(seed=12), 6, CHECKPOINT)
    assert str(e.value) == (
        f"--seed 12 differs from 11 in checkpoint {CHECKPOINT}: {RESUME_FLAGS['seed'][1]}; "
        "resume with --seed 11 or use a new --output_dir"
    )


@pytest.mark.parametrize(("old", "new"), [(False, True), (True, False)])
def test_given_a_refused_switch_changed_then_the_message_says_set_or_not_and_the_fix(old, new):
    # A switch reads as set or not (--fp32_master_weights takes no value), never True/False
    recorded = RecordedRun(flags={**SAVED, "fp32_master_weights": old})
    with pytest.raises(ResumeError) as e:
        check_flags(recorded, flags(fp32_master_weights=new), 6, CHECKPOINT)
    is_set, fix = ("set", "without") if new else ("not set", "with")
    assert str(e.value) == (
        f"--fp32_master_weights is {is_set}, unlike in the run of checkpoint {CHECKPOINT}: "
        f"{RESUME_FLAGS['fp32_master_weights'][1]}; resume {fix} --fp32_master_weights or use a new "
        "--output_dir"
    )


def test_given_another_shard_count_then_the_message_names_both_counts_and_the_fix():
    with pytest.raises(ResumeError) as e:
        check_flags(RecordedRun(flags=SAVED, num_shards=6), flags(), 5, CHECKPOINT)
    assert str(e.value) == (
        f"--data_dir /fsx/data holds 5 shards, the run of checkpoint {CHECKPOINT} read 6: the saved data "
        "positions would point at other samples; restore the shards or use a new --output_dir"
    )
    # And a checkpoint that recorded no shard count is not compared
    assert check_flags(RecordedRun(flags=SAVED), flags(), 5, CHECKPOINT) == []


def test_given_the_first_loss_at_the_jump_bound_then_it_passes_and_just_above_it_fails():
    # Given a recorded loss of 3: the bound is 2 x 3 + 1 = 7 nats
    check_resumed_loss(7.0, 3.0, CHECKPOINT, 5)  # at the bound: not a jump
    check_resumed_loss(1e9, None, CHECKPOINT, 5)  # nothing recorded: only finiteness is checked
    with pytest.raises(ResumeError) as e:
        check_resumed_loss(7.0001, 3.0, CHECKPOINT, 5)
    assert str(e.value) == (
        f"loss 7 at step 5, the first after resuming from {CHECKPOINT}, which recorded 3: the restored "
        "state is wrong; move that checkpoint out to fall back to an older one"
    )
    for loss in (float("inf"), float("nan")):
        with pytest.raises(ResumeError) as e:
            check_resumed_loss(loss, None, CHECKPOINT, 5)
        assert str(e.value) == (
            f"loss {loss} at step 5, the first after resuming from {CHECKPOINT}: the restored state "
            "is wrong; move that checkpoint out to fall back to an older one"
        )
