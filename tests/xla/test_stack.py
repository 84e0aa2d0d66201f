"""The environment is the one the table names, and torch-xla really runs on its CPU runtime."""

from __future__ import annotations

import torch
import torch_xla

from training.trainer.device import select_device
from trainium_job.neuron_stack import NEURON_STACK


def test_given_venv_xla_then_torch_and_torch_xla_are_the_tables_versions():
    assert torch.__version__.split("+")[0] == NEURON_STACK.torch
    assert torch_xla.__version__.split("+")[0] == NEURON_STACK.torch_xla


def test_given_pjrt_cpu_then_auto_device_is_xla_and_tensors_live_there():
    assert select_device("auto") == "xla"
    x = torch.arange(4.0, device=torch_xla.device()) * 2
    torch_xla.sync()
    assert x.device.type == "xla" and x.cpu().tolist() == [0.0, 2.0, 4.0, 6.0]
