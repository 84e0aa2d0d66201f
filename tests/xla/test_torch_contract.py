"""The torch of the training image (torch 2.9.0 in ``.venv-xla``) reads and waits what the
consumer table ``tests/contracts/torch_elastic.py`` says it does."""

from __future__ import annotations

import inspect
import os
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


def test_given_the_image_torch_then_c10d_takes_is_host_from_the_conf_and_rdzv_conf_from_pet_rdzv_conf():
    # The worker script decides is_host and passes it in PET_RDZV_CONF (trainium_job.launch.c10d_host_lines).
    from torch.distributed.argparse_util import env
    from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend as c10d
    from torch.distributed.run import get_args_parser

    assert 'params.get_as_bool("is_host")' in inspect.getsource(c10d._create_tcp_store)
    (conf,) = [a for a in get_args_parser()._actions if a.dest == "rdzv_conf"]
    assert isinstance(conf, env)
    os.environ["PET_RDZV_CONF"] = "is_host=1,read_timeout=5"
    try:
        assert get_args_parser().parse_args(["x.py"]).rdzv_conf == "is_host=1,read_timeout=5"
        assert get_args_parser().parse_args(["--rdzv_conf", "a=b", "x.py"]).rdzv_conf == "a=b"
    finally:
        del os.environ["PET_RDZV_CONF"]
    assert {e.name for e in torch_elastic.C10D_CONF.entries} >= {"PET_RDZV_CONF", "is_host"}
