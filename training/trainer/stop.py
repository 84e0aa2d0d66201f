"""Graceful stop: on SIGTERM every rank finishes its optimizer step, a checkpoint is written,
and the process exits with ``STOP_EXIT_CODE`` (non-zero, so torchrun / Volcano restart the job,
which resumes from that checkpoint having lost no step).

Where the signal comes from: Kubernetes sends SIGTERM to the container's PID 1 when a pod is
deleted, drained, evicted or preempted, and SIGKILL after ``terminationGracePeriodSeconds``.
PID 1 is the worker script, which passes the signal on to torchrun and exits 143 once it has
ended (``trainium_job.worker``). torchrun's agent turns SIGTERM into a
``SignalException`` (``_terminate_process_handler`` in
``torch/distributed/elastic/multiprocessing/api.py``), and ``SimpleElasticAgent.run``
(``agent/server/api.py``) calls ``_shutdown(sigval)``, which closes the worker context:
``os.killpg(worker, SIGTERM)`` for every worker (``subprocess_handler.py``: each worker leads
its own process group, so its data-loader process gets the signal too), a wait of the shutdown
timeout, then SIGKILL. That timeout is 30 s, hard-coded in the image's torch 2.9.0 (from 2.12
on it is ``torchrun --shutdown-timeout`` or ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT``, pytorch/pytorch
#172596); the pod's grace period outlasts it (``trainium_job.stop_budget``).

Agreement: only the ranks of the signalled node see the signal. After every optimizer step
all ranks all-reduce (MAX) their flag over a gloo group, on the CPU: a 4-byte host-side
collective, no device work and no device->host sync, so every rank stops after the same step.
On XLA the group uses the store of torch-xla's ``xla://`` init method, a TCPStore on
MASTER_ADDR/MASTER_PORT (``torch_xla/_internal/rendezvous.py``), unless XLA_USE_DUMMY_STORE=1
with TORCH_DIST_INIT_BARRIER=0 replaces it with a dummy: do not set those with this script.
"""

from __future__ import annotations

import logging
import signal
from datetime import timedelta
from types import FrameType

import torch
import torch.distributed as dist

log = logging.getLogger(__name__)

#: 128 + SIGTERM, the shell's convention for "ended by SIGTERM".
STOP_EXIT_CODE = 143


class Stopped(Exception):  # noqa: N818 - an outcome, not an error
    """Raised by the training loop after the stop checkpoint; ``main`` maps it to the exit code."""


class GracefulStop:
    """Remembers a SIGTERM; ``agreed()`` tells every rank, at a step boundary, if any got one."""

    def __init__(self) -> None:
        self.requested = False
        self._group = None
        self._previous = signal.signal(signal.SIGTERM, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # Only set a flag: the step in flight must finish, and logging here is not signal-safe.
        self.requested = True

    def attach(self, world_size: int, timeout: timedelta | None = None) -> None:
        """Collective: make the CPU group of the agreement (after the process group exists).

        ``timeout``: how long its all-reduce waits for a peer before it raises. A new group does
        not inherit the default group's: without one it gets torch's default, 30 min for gloo
        (``new_group`` -> ``_get_default_timeout``, torch/distributed/distributed_c10d.py
        L741-753 and L5325-5326 at v2.9.0)."""
        if world_size > 1:
            self._group = dist.new_group(backend="gloo", timeout=timeout)

    def agreed(self) -> bool:
        """Collective over all ranks: True when any rank has been asked to stop."""
        if self._group is None:
            return self.requested
        flag = torch.tensor([int(self.requested)], dtype=torch.int32)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self._group)
        return bool(flag.item())  # a CPU tensor: no device involved

    def every_rank(self, flag: bool) -> bool:
        """Collective over all ranks, on the same CPU group: True when ``flag`` is True on every
        rank (what one rank sees on the shared file system, say a held-out set that has just
        arrived, another may not see yet: all must decide alike)."""
        if self._group is None:
            return flag
        value = torch.tensor([int(flag)], dtype=torch.int32)
        dist.all_reduce(value, op=dist.ReduceOp.MIN, group=self._group)
        return bool(value.item())

    def close(self) -> None:
        signal.signal(signal.SIGTERM, self._previous)
