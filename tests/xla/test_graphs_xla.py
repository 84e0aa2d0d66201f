"""Graph stability on XLA, the stand-in for Neuron compile cost, measured with torch-xla's counters.

On Trainium every new graph is a neuronx-cc compile (minutes for BERT-large) and every
device-to-host transfer inside a step stalls the device. ``python -m bench.xla_graph_probe`` runs the
real training loop in a fresh process and snapshots the counters around each optimizer step.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.xla.conftest import run_probe, step_log, tiny_args

STEPS, WARMUP_STEPS, ACCUM, LOG_EVERY, CHECKPOINT_EVERY, LR_WARMUP = 26, 2, 3, 5, 7, 4


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("graphs") / "run"


@pytest.fixture(scope="module")
def probe(shards, run_dir) -> dict:
    """26 steps at the XLA default (bf16), 3 micro-batches each: logs, checkpoints, LR warmup."""
    args = tiny_args(
        shards,
        run_dir,
        "--max_steps",
        str(STEPS),
        "--grad_accum_usteps",
        str(ACCUM),
        "--warmup_steps",
        str(LR_WARMUP),
        "--log_every",
        str(LOG_EVERY),
        "--checkpoint_every",
        str(CHECKPOINT_EVERY),
    )
    return run_probe(run_dir.parent / "probe.json", args)


def test_given_warm_graphs_then_no_compile_for_24_steps_across_logs_checkpoints_and_lr_change(probe):
    steps = probe["steps"]
    assert len(steps) == STEPS
    after_warmup = steps[WARMUP_STEPS]["before"]["compiles"]
    # The window holds logging steps (5, 10, ...), checkpoints after steps 7, 14, 21, the end of
    # the LR warmup (step 4 -> 5) and the decay after it, and 3 accumulation boundaries a step.
    window = range(WARMUP_STEPS, STEPS)
    assert len(window) >= 20
    assert [steps[i]["after"]["compiles"] for i in window] == [after_warmup] * len(window)
    assert probe["end"]["compiles"] == after_warmup


def test_given_a_run_then_distinct_graphs_are_the_expected_five(probe):
    # First micro-batch (gradients None), later micro-batches (gradients accumulate), the last
    # micro-batch with the update - once with fresh optimizer state, once with existing state -
    # and the model's initialisation on the device.
    assert probe["end"]["compiles"] == 5


def test_given_steps_then_host_transfers_only_at_logging_steps(probe):
    for number, step in enumerate(probe["steps"], start=1):
        transfers = step["after"]["transfers"] - step["before"]["transfers"]
        logged = number % LOG_EVERY == 0 or number == STEPS
        # A logged step reads its loss and grad norm once its graph ran, in one transfer (one
        # tensor of both: StepResult.scalars); no other step reads anything: no mask check, no
        # .item(), no Python branch on a device value.
        assert transfers == (1 if logged else 0), (number, transfers)


def test_given_default_precision_then_bf16_trains_and_loss_falls(probe, run_dir):
    summary = probe["summary"]
    assert (summary["device"], summary["precision"], summary["end_step"]) == ("xla", "bf16", STEPS)
    records = step_log(run_dir)
    assert [r["step"] for r in records] == [5, 10, 15, 20, 25, 26]
    losses = [r["loss"] for r in records]
    assert all(loss == loss for loss in losses)  # no NaN
    assert losses[-1] < losses[0] - 0.3, losses  # a fresh model starts near ln(400) + ln(2)
