"""The torch of the training image (torch 2.9.0 in ``.venv-xla``) reads and waits what the
consumer table ``tests/contracts/torch_elastic.py`` says it does."""

from __future__ import annotations

import inspect
from pathlib import Path

import torch
from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
from torch.distributed.elastic.multiprocessing.api import MultiprocessContext, PContext, SubprocessContext

from tests.contracts import torch_elastic

DISTRIBUTED = Path(torch.__file__).parent / "distributed"


def test_given_the_image_torch_then_it_is_the_tables_version():
    assert torch.__version__.split("+")[0] == torch_elastic.VERSION


def test_given_the_image_torch_then_torchrun_waits_a_fixed_window_before_sigkill():
    for close in (PContext.close, SubprocessContext._close, MultiprocessContext._close):
        assert inspect.signature(close).parameters["timeout"].default == torch_elastic.SHUTDOWN_WAIT_S
    # The agent passes no timeout: nothing configures the window.
    assert "self._pcontext.close(death_sig)" in inspect.getsource(LocalElasticAgent._shutdown)


def test_given_the_image_torch_then_each_variable_the_table_lists_as_read_is_in_its_source():
    sources = "\n".join(p.read_text() for p in DISTRIBUTED.rglob("*.py"))
    for entry in torch_elastic.CONTRACT.entries:
        assert (entry.name in sources) == entry.read, entry.name
