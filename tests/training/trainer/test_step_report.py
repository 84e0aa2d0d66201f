"""A logging step's values reach the host in one read: ``StepResult.scalars`` = [loss, grad norm]."""

from __future__ import annotations

import json

import pytest
import torch

from tests.training.trainer.test_train_state import batch, step_state
from training.trainer.metrics import StepLogger
from training.trainer.pretrain import StepReporter
from training.trainer.step import StepResult, optimizer_step


class OneRead:
    """A device tensor's stand-in that counts reads; anything but ``tolist`` (``.item()``, indexing)
    is an AttributeError, so a second transfer cannot hide."""

    def __init__(self, values: list[float]) -> None:
        self.values, self.reads = values, 0

    def tolist(self) -> list[float]:
        self.reads += 1
        return self.values


def test_given_a_step_then_its_scalars_are_loss_and_grad_norm_in_one_fp32_tensor():
    # Given a tiny model's optimizer step, reported
    reported: list[StepResult] = []
    result = optimizer_step(step_state(3), iter([batch()]), reported.append)
    # Then the report holds one tensor of both values, in that order
    assert reported == [result]
    assert result.scalars.dtype == torch.float32 and result.scalars.shape == (2,)
    loss, grad_norm = result.scalars.tolist()
    assert loss == pytest.approx(result.loss.item()) and grad_norm == pytest.approx(result.grad_norm.item())
    assert loss != pytest.approx(grad_norm)  # the order is checked, not a coincidence


def test_given_a_logging_step_then_the_reporter_reads_the_device_once(tmp_path):
    # Given rank 0's reporter writing the step log
    log = tmp_path / "train_log.jsonl"
    reporter = StepReporter(StepLogger(True, log, None, restart=0), 8, 1e9, None, 1)
    scalars = OneRead([2.5, 0.75])
    # When a logged step's values arrive
    reporter(3, 1e-4, scalars)  # type: ignore[arg-type]
    # Then they were read in one transfer and logged under their names
    assert scalars.reads == 1
    record = json.loads(log.read_text())
    assert (record["step"], record["loss"], record["grad_norm"], record["lr"]) == (3, 2.5, 0.75, 1e-4)
    assert reporter.last_loss == 2.5
