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


def neuron_env() -> dict[str, str]:
    """Environment of every training container (EFA transport, Neuron compiler).

    - FI_PROVIDER=efa, FI_EFA_USE_DEVICE_RDMA=1: the multi-node environment of Neuron's
      "Setup Trn1 multi-node execution" guide; with the latter libfabric uses the device's RDMA
      (trn1 has it) and aborts rather than silently running without it.
    - Not NEURON_CC_FLAGS: the compile cache of each phase is in the job's description (the
      phase's ``env``), which the pod program gives that phase's commands
      (``trainium_job.worker.phase_description``).
    - FI_EFA_USE_HUGE_PAGE=0: regular pages for libfabric's buffers (see
      :mod:`trainium_job.huge_pages`).
    """
    return {
        "FI_PROVIDER": "efa",
        "FI_EFA_USE_DEVICE_RDMA": "1",
        **HUGE_PAGE_ENV,
        "PYTHONUNBUFFERED": "1",
    }


def container_env(spec: LaunchSpec) -> dict[str, str]:
    """The training container's whole environment: what torchrun needs (restarts with a fresh
    rendezvous store, see :func:`trainium_job.launch.launch_env`) plus :func:`neuron_env`."""
    return {**launch_env(spec), **neuron_env()}
