"""The environment of every training container: torchrun's, the stop budget, EFA and Neuron."""

from __future__ import annotations

from .launch import LaunchSpec, launch_env
from .paths import JobPaths
from .stop_budget import stop_budget_s


def neuron_env(paths: JobPaths) -> dict[str, str]:
    """Environment of every training container (EFA transport, Neuron runtime and compiler).

    - FI_PROVIDER/FI_EFA_USE_DEVICE_RDMA/FI_EFA_FORK_SAFE: libfabric over EFA with RDMA reads
      (trn1 supports them); fork-safe because the data loader may fork.
    - CCOM_SOCKET_IFNAME=eth0: the Neuron collectives bootstrap over the pod's interface.
    - NEURON_RT_RESET_CORES=1: reset the cores a crashed predecessor left busy, so a restart
      after a failure does not hang on acquire.
    - NEURON_CC_FLAGS: the compile cache on FSx, shared by the nodes of this job and reused by
      later runs of the same cache set.
    """
    return {
        "FI_PROVIDER": "efa",
        "FI_EFA_USE_DEVICE_RDMA": "1",
        "FI_EFA_FORK_SAFE": "1",
        "CCOM_SOCKET_IFNAME": "eth0",
        "NEURON_RT_RESET_CORES": "1",
        "NEURON_CC_FLAGS": f"--cache_dir={paths.cache_dir}",
        "PYTHONUNBUFFERED": "1",
    }


def container_env(spec: LaunchSpec, paths: JobPaths) -> dict[str, str]:
    """The training container's whole environment: what torchrun needs (restarts with a fresh
    rendezvous store, see :func:`trainium_job.launch.launch_env`; the workers' stop budget, see
    :func:`~trainium_job.stop_budget.stop_budget_s`) plus :func:`neuron_env`."""
    return {**launch_env(spec), "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": str(stop_budget_s()), **neuron_env(paths)}
