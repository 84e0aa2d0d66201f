"""The environment of every training container: torchrun's, EFA's and Neuron's.

Each variable is there because its consumer reads it at the version the image pins (the tables
in ``tests/contracts`` cite them, and a test fails on a variable no consumer reads). Left out on
purpose: ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT`` (torch 2.9.0 reads no such variable: torchrun waits a
fixed 30 s, see :mod:`trainium_job.stop_budget`); ``CCOM_SOCKET_IFNAME`` (no Neuron document says
the collectives read it, and a pod has one interface besides ``lo``); ``NEURON_RT_RESET_CORES``
(resetting the NeuronCores at start-up is the runtime's default); ``FI_EFA_FORK_SAFE`` (needed
only on kernels older than 5.15, i.e. Amazon Linux 2; the AL2023 Neuron AMIs run 6.1 and later,
where libfabric ignores it).
"""

from __future__ import annotations

from .huge_pages import HUGE_PAGE_ENV
from .launch import LaunchSpec, launch_env
from .paths import JobPaths


def neuron_env(paths: JobPaths) -> dict[str, str]:
    """Environment of every training container (EFA transport, Neuron compiler).

    - FI_PROVIDER=efa, FI_EFA_USE_DEVICE_RDMA=1: the multi-node environment of Neuron's
      "Setup Trn1 multi-node execution" guide; with the latter libfabric uses the device's RDMA
      (trn1 has it) and aborts rather than silently running without it.
    - NEURON_CC_FLAGS=--cache_dir=...: the compile cache on FSx, shared by the nodes of this
      job and reused by later runs of the same cache set; ``neuron_parallel_compile`` and the
      training run read the same variable, so both use the same cache (Neuron's
      "neuron_parallel_compile" guide: the same cache URL for both).
    - FI_EFA_USE_HUGE_PAGE=0: regular pages for libfabric's buffers (see
      :mod:`trainium_job.huge_pages`).
    """
    return {
        "FI_PROVIDER": "efa",
        "FI_EFA_USE_DEVICE_RDMA": "1",
        **HUGE_PAGE_ENV,
        "NEURON_CC_FLAGS": f"--cache_dir={paths.cache_dir}",
        "PYTHONUNBUFFERED": "1",
    }


def container_env(spec: LaunchSpec, paths: JobPaths) -> dict[str, str]:
    """The training container's whole environment: what torchrun needs (restarts with a fresh
    rendezvous store, see :func:`trainium_job.launch.launch_env`) plus :func:`neuron_env`."""
    return {**launch_env(spec), **neuron_env(paths)}
