"""torchrun / torch.distributed.elastic: the ``TORCH*`` variables the image's torch reads and
sets, and the fixed time it gives its workers between SIGTERM and SIGKILL.

Version: torch 2.9.0 (the Neuron PyTorch/XLA training images; ``torch/version.py``:
``__version__ = '2.9.0'``, git 0fabc3ba44823f257e70ce397d989c8de5e362c1), read in the PyPI wheel.
``tests/xla/test_torch_contract.py`` checks these facts against the installed torch of ``.venv-xla``.
"""

from __future__ import annotations

from tests.contracts.model import Contract, Entry

VERSION = "2.9.0"
_SRC = "pytorch/pytorch@v2.9.0:torch/distributed/elastic"
_AGENT = f"{_SRC}/agent/server/local_elastic_agent.py"

#: torchrun's wait between its workers' SIGTERM and SIGKILL: a default argument, 30 s, and
#: ``LocalElasticAgent._shutdown`` passes none (no flag, no variable in 2.9.0).
SHUTDOWN_WAIT_S = 30
SHUTDOWN_WAIT_SOURCE = (
    f"{_SRC}/multiprocessing/api.py:564-565 (PContext.close(..., timeout: int = 30)), :771, :903 "
    f"(_close(..., timeout: int = 30)); {_AGENT}:361-369 (_shutdown calls self._pcontext.close(death_sig))"
)

CONTRACT = Contract(
    consumer="torchrun (torch.distributed.elastic agent and rendezvous)",
    version=VERSION,
    entries=(
        Entry(
            "TORCH_DISABLE_SHARE_RDZV_TCP_STORE",
            "'1': each rendezvous round's rank 0 hosts a fresh store instead of one store shared "
            "by every round (c10d and etcd-v2 backends)",
            f"{_SRC}/rendezvous/dynamic_rendezvous.py:1145,1193",
            values=("0", "1"),
        ),
        Entry(
            "TORCH_ELASTIC_SHUTDOWN_TIMEOUT",
            "NOT read by torch 2.9.0: it arrived with pytorch/pytorch#172596 (torch 2.12); 2.9.0 "
            "waits a fixed 30 s (SHUTDOWN_WAIT_SOURCE)",
            f"{SHUTDOWN_WAIT_SOURCE}; no occurrence under torch/distributed in the 2.9.0 wheel",
            read=False,
        ),
        Entry(
            "TORCH_ELASTIC_WORKER_IDENTICAL",
            "'1': ranks assigned arithmetically instead of through the store",
            f"{_SRC}/agent/server/api.py:591",
            values=("0", "1"),
        ),
        Entry(
            "TORCHELASTIC_ENABLE_FILE_TIMER",
            "'1': the agent runs a file-timer watchdog",
            f"{_AGENT}:50,166-170",
        ),
        Entry("TORCHELASTIC_TIMER_FILE", "the watchdog's file", f"{_AGENT}:51,169-170"),
        Entry(
            "TORCHELASTIC_HEALTH_CHECK_PORT", "port of the agent's health-check server", f"{_AGENT}:52,207"
        ),
        *(
            Entry(name, "set by the agent for each worker", f"{_AGENT}:305-323", sets_itself=True)
            for name in (
                "LOCAL_RANK",
                "RANK",
                "GROUP_RANK",
                "ROLE_RANK",
                "ROLE_NAME",
                "LOCAL_WORLD_SIZE",
                "WORLD_SIZE",
                "GROUP_WORLD_SIZE",
                "ROLE_WORLD_SIZE",
                "MASTER_ADDR",
                "MASTER_PORT",
                "TORCHELASTIC_RESTART_COUNT",
                "TORCHELASTIC_MAX_RESTARTS",
                "TORCHELASTIC_RUN_ID",
                "TORCHELASTIC_USE_AGENT_STORE",
            )
        ),
        Entry(
            "TORCH_NCCL_ASYNC_ERROR_HANDLING",
            "passed to the workers (default 1); read by the NCCL process group only",
            f"{_AGENT}:321-323",
        ),
    ),
)

_C10D = f"{_SRC}/rendezvous/c10d_rendezvous_backend.py"
#: ``--rdzv_conf`` keys of the c10d backend the job sets, and where torchrun reads the flag from.
#: ``PET_RDZV_CONF``: run.py declares ``--rdzv_conf`` with ``action=env`` (run.py:449), which takes
#: the flag's default from ``PET_`` + its upper-cased name and lets a flag on the command line
#: replace it whole (torch/distributed/argparse_util.py:45-46, ``env``).
C10D_CONF = Contract(
    consumer="torchrun --rdzv_conf, c10d rendezvous backend",
    version=VERSION,
    entries=(
        Entry(
            "PET_RDZV_CONF",
            "the value of --rdzv_conf when the flag is absent (comma-separated key=value)",
            "pytorch/pytorch@v2.9.0:torch/distributed/run.py:449; torch/distributed/argparse_util.py:45-46",
        ),
        Entry(
            "is_host",
            "set: this agent hosts the TCPStore (true) or connects to it (false), with no fallback; "
            "unset: guessed once by _matches_machine_hostname (endpoint host == gethostname(), or == the "
            "canonical name of our own, or our addresses among the endpoint's addresses: the lookup failing "
            "means 'not me'), falling back to a client when hosting fails",
            f"{_C10D}:137-187 (_create_tcp_store), :234-245 (the is_host row); "
            f"{_SRC}/rendezvous/utils.py:116-165 (_matches_machine_hostname; 139-140: a failed lookup is [])",
            values=("0", "1", "true", "false"),
        ),
        Entry(
            "read_timeout",
            "seconds a store operation (and a non-host agent's connection) waits; default 60",
            f"{_C10D}:152-157 (TCPStore(..., timeout=read_timeout))",
        ),
    ),
)
