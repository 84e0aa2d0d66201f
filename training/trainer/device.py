"""The ONE place where XLA (Trainium), CUDA and CPU differ.

The training loop talks to a ``Backend``; each subclass overrides only what its device does
differently. torch_xla is imported lazily inside ``XlaBackend`` so this module imports on
machines without it; a native-PyTorch Neuron backend would be one more subclass.

Precision modes (``--precision``):

* ``fp32``: everything fp32 (CPU default).
* ``amp_bf16``: fp32 weights, bf16 autocast of the forward (CUDA default).
* ``bf16``: the model is cast to bfloat16 (XLA default). On Neuron this is paired with
  stochastic rounding, ``NEURON_RT_STOCHASTIC_ROUNDING_EN=1`` — the replacement for
  XLA_USE_BF16/XLA_DOWNCAST_BF16, which are deprecated and gone from torch-xla 2.8 (Neuron
  app note "Migration From XLA_USE_BF16/XLA_DOWNCAST_BF16"). With ``--fp32_master_weights``
  the optimizer updates fp32 copies instead and stochastic rounding is not enabled (the
  note's "GPU-compatible mode").
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import nn

from .cli import DEVICES, PRECISIONS
from .metrics import TRN1_NEURONCORE_PEAK_FLOPS, cuda_peak_flops

ModuleT = TypeVar("ModuleT", bound=nn.Module)

log = logging.getLogger(__name__)

DEFAULT_PRECISION = {"xla": "bf16", "cuda": "amp_bf16", "cpu": "fp32"}
# Optimizer steps between log lines (``--log_every 0``). Logging reads the loss and grad norm
# back to the host: on XLA the step waits for the device there instead of tracing the next one.
DEFAULT_LOG_EVERY = {"xla": 10, "cuda": 1, "cpu": 1}


def xla_available() -> bool:
    return importlib.util.find_spec("torch_xla") is not None


def neuron_available() -> bool:
    return importlib.util.find_spec("torch_neuronx") is not None


def select_device(
    requested: str,
    *,
    has_xla: Callable[[], bool] = xla_available,
    has_neuron: Callable[[], bool] = neuron_available,
    has_cuda: Callable[[], bool] = torch.cuda.is_available,
) -> str:
    """Resolve ``--device``: ``auto`` picks Neuron/XLA, then CUDA, then CPU.

    ``auto`` takes XLA only where torch-neuronx is installed or PJRT_DEVICE names a device:
    a torch_xla wheel alone (say on a GPU box) is not a reason to leave CUDA.
    """
    if requested not in DEVICES:
        raise ValueError(f"device: {requested!r} is not one of {', '.join(DEVICES)}")
    if requested == "auto":
        if has_neuron() or (has_xla() and os.environ.get("PJRT_DEVICE")):
            return "xla"
        return "cuda" if has_cuda() else "cpu"
    if requested == "xla" and not has_xla():
        raise RuntimeError("device xla: torch_xla is not installed (on Trainium use the torch-neuronx image)")
    if requested == "cuda" and not has_cuda():
        raise RuntimeError("device cuda: no CUDA device is visible to PyTorch")
    return requested


def resolve_log_every(device: str, requested: int) -> int:
    """``--log_every``: 0 means the device's default (``DEFAULT_LOG_EVERY``)."""
    if requested < 0:
        raise ValueError(f"log_every: {requested} must be >= 0 (0: {DEFAULT_LOG_EVERY[device]} on {device})")
    return requested or DEFAULT_LOG_EVERY[device]


def resolve_precision(device: str, requested: str, fp32_master_weights: bool = False) -> str:
    if requested not in PRECISIONS:
        raise ValueError(f"precision: {requested!r} is not one of {', '.join(PRECISIONS)}")
    precision = DEFAULT_PRECISION[device] if requested == "auto" else requested
    if fp32_master_weights and precision != "bf16":
        raise ValueError("--fp32_master_weights only applies to --precision bf16")
    return precision


def move_keeping_ties(model: ModuleT, device: torch.device) -> ModuleT:
    """``model.to(device)``, then the parameters shared before (tied weights) shared again.

    ``Module.to`` swaps the tensor inside each Parameter where it can (CPU <-> CUDA, dtype
    casts), but moving to an XLA device makes a new Parameter per module attribute: BERT's MLM
    decoder weight and bias would become copies of the word embeddings and the head's bias,
    trained apart from them (found on torch-xla 2.9: the head's bias got no gradient).
    """
    first: dict[int, str] = {}
    ties: list[tuple[str, str]] = []
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in first:
            ties.append((name, first[id(p)]))
        else:
            first[id(p)] = name
    model = model.to(device)
    for name, source in ties:
        owner, _, attr = name.rpartition(".")
        setattr(model.get_submodule(owner), attr, model.get_parameter(source))
    return model


class Backend:
    """CPU behaviour (gloo); the base for the other devices."""

    name = "cpu"
    dist_backend = "gloo"
    attn_implementation = "sdpa"

    def __init__(self, local_rank: int, rank: int, world_size: int) -> None:
        self.local_rank = local_rank
        self.rank = rank
        self.world_size = world_size

    # --- set-up ---------------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    def configure_precision(self, precision: str, fp32_master_weights: bool) -> None:
        """Called before the device runtime starts (env vars must be set by then)."""

    def init_distributed(self, timeout: timedelta | None = None) -> None:
        """The default process group; ``timeout``: how long its collectives wait for a peer before
        they raise (torch's default when None: 30 min, NCCL 10 min; ``init_process_group``'s
        ``timeout``, torch/distributed/distributed_c10d.py L1601-1606 at v2.9.0)."""
        if self.world_size > 1 and not dist.is_initialized():
            dist.init_process_group(self.dist_backend, timeout=timeout)
        # No destroy_process_group at the end: the groups live until the process ends
        # (training.trainer.worker_exit says why).

    def prepare_model(self, model: ModuleT, precision: str) -> ModuleT:
        model = move_keeping_ties(model, self.device)
        return model.to(torch.bfloat16) if precision == "bf16" else model

    def wrap_model(self, model: nn.Module) -> nn.Module:
        """DDP over the process group (gradients all-reduced in backward)."""
        if self.world_size == 1:
            return model
        device_ids = [self.device.index] if self.device.type == "cuda" else None
        return nn.parallel.DistributedDataParallel(model, device_ids=device_ids)

    # --- per micro-step -------------------------------------------------------------------
    def no_sync(self, model: nn.Module, boundary: bool) -> contextlib.AbstractContextManager:
        """Skip DDP's gradient all-reduce on micro-steps before the accumulation boundary."""
        if boundary or not isinstance(model, nn.parallel.DistributedDataParallel):
            return contextlib.nullcontext()
        return model.no_sync()

    def autocast(self, precision: str) -> contextlib.AbstractContextManager:
        if precision == "amp_bf16":
            return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def batches(self, loader: Iterable[dict[str, torch.Tensor]]) -> Iterator[dict[str, torch.Tensor]]:
        """Device-resident batches from a CPU loader."""
        yield from loader  # already on the CPU

    # --- per optimizer step ---------------------------------------------------------------
    def reduce_gradients(self, params: list[torch.Tensor]) -> None:
        """Average gradients across ranks if the wrapper did not (DDP does)."""

    def all_reduce_mean(self, t: torch.Tensor) -> torch.Tensor:
        if self.world_size == 1:
            return t
        t = t.clone()
        dist.all_reduce(t)  # SUM: gloo has no AVG
        return t / self.world_size

    def mark_step(self) -> None:
        """End of an optimizer step (XLA: cut and run the graph)."""

    def defer(self, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` once ``args`` are computed (XLA: after the step's graph ran)."""
        fn(*args)

    def synchronize(self) -> None:
        """Wait for queued device work (for timing and before saving)."""

    def barrier(self) -> None:
        if self.world_size > 1:
            dist.barrier()

    # --- state ----------------------------------------------------------------------------
    def rng_state(self) -> Any:
        return None

    def set_rng_state(self, state: Any) -> None:
        pass

    def seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def peak_flops(self) -> float | None:
        return None


class CudaBackend(Backend):
    name = "cuda"
    dist_backend = "nccl"

    def __init__(self, local_rank: int, rank: int, world_size: int) -> None:
        super().__init__(local_rank, rank, world_size)
        torch.cuda.set_device(local_rank)
        # TF32 for any fp32 matmul left outside autocast.
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    @property
    def device(self) -> torch.device:
        return torch.device("cuda", self.local_rank)

    def batches(self, loader):
        for batch in loader:
            yield {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)

    def rng_state(self) -> Any:
        return torch.cuda.get_rng_state(self.device)

    def set_rng_state(self, state: Any) -> None:
        if state is not None:
            torch.cuda.set_rng_state(state, self.device)

    def peak_flops(self) -> float | None:
        return cuda_peak_flops(torch.cuda.get_device_name(self.device))


class XlaBackend(Backend):
    """torch-xla / torch-neuronx; run on torch-xla's CPU runtime by ``make test-xla``.

    Differences: the ``xla`` process group; no DDP — gradients are all-reduced once per
    optimizer step after accumulation (as the Neuron BERT tutorial does); batches go through
    ``MpDeviceLoader``, which also cuts the graph after each micro-batch; ``torch_xla.sync``
    after the optimizer step; logging runs in a step closure, after the step's graph ran.
    """

    name = "xla"
    dist_backend = "xla"
    # Eager attention: plain matmul/softmax ops, the form the Neuron compiler is known to take.
    attn_implementation = "eager"

    def __init__(self, local_rank: int, rank: int, world_size: int) -> None:
        super().__init__(local_rank, rank, world_size)
        self._xm = None

    @property
    def xm(self):
        if self._xm is None:
            import torch_xla.core.xla_model as xm  # lazy: absent off Trainium

            self._xm = xm
        return self._xm

    @property
    def device(self) -> torch.device:
        import torch_xla

        return torch_xla.device()

    def configure_precision(self, precision: str, fp32_master_weights: bool) -> None:
        if precision == "bf16" and not fp32_master_weights:
            # Must be set before the Neuron runtime starts; an explicit user setting wins.
            os.environ.setdefault("NEURON_RT_STOCHASTIC_ROUNDING_EN", "1")
        for var in ("XLA_USE_BF16", "XLA_DOWNCAST_BF16"):
            if os.environ.get(var):
                log.warning("%s is set: deprecated and ignored by recent torch-xla; unset it", var)

    def init_distributed(self, timeout: timedelta | None = None) -> None:
        """``timeout`` is handed on, but torch-xla 2.9's process group only keeps it: its
        collectives run on the device and wait as long as the runtime does
        (``ProcessGroupXla.__init__`` and ``allreduce``, torch_xla/distributed/xla_backend.py L41-45
        and L81 at v2.9.0). The step watchdog bounds a hang there; the stop agreement's gloo group
        has the timeout (``training.trainer.stop``)."""
        if self.world_size > 1 and not dist.is_initialized():
            import torch_xla.distributed.xla_backend  # noqa: F401 - registers the 'xla' backend

            dist.init_process_group("xla", init_method="xla://", timeout=timeout)
            # xla:// takes the world from the XLA runtime, not from torchrun. Where the runtime
            # does not span the processes (PJRT_DEVICE=CPU: one client per process, no
            # coordinator), every collective would silently reduce over this process alone.
            if dist.get_world_size() != self.world_size:
                raise RuntimeError(
                    f"WORLD_SIZE={self.world_size} (torchrun) but the XLA runtime "
                    f"(PJRT_DEVICE={os.environ.get('PJRT_DEVICE', 'unset')}) joins "
                    f"{dist.get_world_size()} device(s): its collectives would not span the "
                    "processes. Run one process per device on Neuron/TPU, or a single process"
                )

    def wrap_model(self, model: nn.Module) -> nn.Module:
        if self.world_size > 1:
            # Same seed gives the same init everywhere; broadcasting rank 0's makes it certain.
            self.xm.broadcast_master_param(model)
        return model

    def batches(self, loader):
        import torch_xla.distributed.parallel_loader as pl

        yield from pl.MpDeviceLoader(loader, self.device)

    def reduce_gradients(self, params: list[torch.Tensor]) -> None:
        # One functional all-reduce per gradient, assigned back. With the in-place list form
        # (xm.all_reduce on a list; xm.all_reduce_bucketized_gradients alike) clip_grad_norm_
        # returned 1.31 where the reduced gradients' norm was 0.92 (torch-xla 2.9, PJRT CPU, one
        # replica with XLA_ALWAYS_ALLREDUCE=1; tests/xla/test_distributed_xla.py): a wrong
        # norm is a wrong clip coefficient. Not checked on Neuron.
        if self.world_size > 1:
            for p in params:
                if p.grad is not None:
                    p.grad = self.xm.all_reduce(self.xm.REDUCE_SUM, p.grad, scale=1.0 / self.world_size)

    def all_reduce_mean(self, t: torch.Tensor) -> torch.Tensor:
        if self.world_size == 1:
            return t
        return self.xm.all_reduce(self.xm.REDUCE_SUM, t, scale=1.0 / self.world_size)

    def mark_step(self) -> None:
        import torch_xla  # xm.mark_step is deprecated since torch-xla 2.8

        torch_xla.sync()

    def defer(self, fn, *args) -> None:
        self.xm.add_step_closure(fn, args=args)

    def synchronize(self) -> None:
        self.xm.wait_device_ops()

    def barrier(self) -> None:
        if self.world_size > 1:
            self.xm.rendezvous("training-barrier")

    def rng_state(self) -> Any:
        return self.xm.get_rng_state(self.device)

    def set_rng_state(self, state: Any) -> None:
        if state is not None:
            self.xm.set_rng_state(int(state), self.device)

    def seed(self, seed: int) -> None:
        torch.manual_seed(seed)
        self.xm.set_rng_state(seed, self.device)

    def peak_flops(self) -> float | None:
        # One rank drives one NeuronCore-v2 on trn1; other Neuron chips: use --peak_tflops.
        return TRN1_NEURONCORE_PEAK_FLOPS


_BACKENDS: dict[str, type[Backend]] = {"cpu": Backend, "cuda": CudaBackend, "xla": XlaBackend}


def make_backend(device: str, local_rank: int, rank: int, world_size: int) -> Backend:
    """The backend for a resolved device name (see ``select_device``)."""
    return _BACKENDS[device](local_rank, rank, world_size)
