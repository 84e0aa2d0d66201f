"""The rehearsal's ``torch_xla`` in the deep check's pods (installed as ``/rehearsal/python/
torch_xla/__init__.py`` and put first on those pods' PYTHONPATH only: the gang's trainer keeps its
CPU path). The compute check then takes its XLA branch, as in the training image, and
``device()`` answers the CPU: a NeuronCore that works.

A node with a compute fault (``core_faults[<pod host name>]`` in the stand-ins' config: a
NeuronCore index) is one whose core returns wrong numbers without an error, the failure the
check exists for: the process that sees that core (``NEURON_RT_VISIBLE_CORES``, which the check
sets per process) gets the first element of every matrix product off by one. Standard library and
torch only, as the pods have them.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

#: The stand-ins' config in the pod (tests.rehearsal.standins MOUNT / CONFIG).
CONFIG = Path("/rehearsal/standins.json")
#: The torch functions a matrix product goes through (``a @ b`` reaches a mode as ``matmul``).
PRODUCTS = frozenset({"matmul", "__matmul__", "mm"})


class OneElementOff(TorchFunctionMode):
    """Every matrix product computed right, then its first element raised by one."""

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Sequence[type],
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> Any:
        out = func(*args, **(kwargs or {}))
        if getattr(func, "__name__", "") in PRODUCTS and isinstance(out, torch.Tensor):
            out = out.clone()
            out.view(-1)[0] += 1
        return out


def faulty_core(config: Path | None = None) -> int | None:
    """The NeuronCore of this pod's node that computes wrong, if any (``config``: :data:`CONFIG`)."""
    faults = json.loads((config or CONFIG).read_text()).get("core_faults", {})
    core = faults.get(socket.gethostname())
    return None if core is None else int(core)


def device() -> torch.device:
    """This process's NeuronCore: the CPU, computing wrong if it is the node's faulty core."""
    visible = os.environ.get("NEURON_RT_VISIBLE_CORES")
    if visible is not None and faulty_core() == int(visible):
        OneElementOff().__enter__()  # for the rest of the process, as a bad core stays bad
    return torch.device("cpu")
