"""One optimizer step: accumulate micro-batches, average gradients, clip, update.

Shared by ``training.trainer.pretrain`` and the step benchmarks (``python -m bench.bench_step``,
``python -m bench.bench_gpu``), so the benchmarks time exactly the training loop's code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch import nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR

from .device import Backend
from .model import PretrainingModule
from .optim import MasterWeights, build_optimizer, build_scheduler, param_groups


@dataclass
class StepState:
    """The state an optimizer step reads and updates. ``model`` may be a DDP wrapper of ``module``."""

    backend: Backend
    module: PretrainingModule
    model: nn.Module
    optimizer: Optimizer
    scheduler: LambdaLR
    precision: str
    grad_accum: int
    max_grad_norm: float
    model_params: list[torch.Tensor]
    opt_params: list[torch.Tensor]
    master: MasterWeights | None = None


def make_step_state(
    backend: Backend,
    module: PretrainingModule,
    *,
    precision: str,
    optimizer: str,
    lr: float,
    weight_decay: float,
    warmup_steps: int,
    max_steps: int,
    grad_accum: int,
    max_grad_norm: float,
    fp32_master_weights: bool = False,
) -> StepState:
    """Optimizer, schedule and (optional) fp32 masters over an already prepared ``module``.

    The model is not wrapped yet (``state.model is module``): load a checkpoint first,
    then ``state.model = backend.wrap_model(module)``.
    """
    groups = param_groups(module, weight_decay)
    master = MasterWeights(groups) if fp32_master_weights else None
    opt_groups = master.groups if master else groups
    opt = build_optimizer(optimizer, opt_groups, lr)
    return StepState(
        backend=backend,
        module=module,
        model=module,
        optimizer=opt,
        scheduler=build_scheduler(opt, warmup_steps, max_steps),
        precision=precision,
        grad_accum=grad_accum,
        max_grad_norm=max_grad_norm,
        model_params=[p for g in groups for p in g["params"]],
        opt_params=[p for g in opt_groups for p in g["params"]],
        master=master,
    )


@dataclass
class StepResult:
    loss: torch.Tensor  # mean over ranks and micro-batches, still on the device
    grad_norm: torch.Tensor  # before clipping
    lr: float  # the rate this update used
    position: torch.Tensor | None  # data position after the last micro-batch
    #: ``[loss, grad_norm]`` in one fp32 tensor, made in every step's graph (so a logging step's
    #: graph is the others'): a logging step reads both with one device-to-host transfer.
    scalars: torch.Tensor


def optimizer_step(
    t: StepState,
    batches: Iterator[dict[str, torch.Tensor]],
    report: Callable[[StepResult], None] | None = None,
    progress: Callable[[str], None] | None = None,
) -> StepResult:
    """Run ``grad_accum`` micro-batches and one update; nothing here waits for the device.

    ``report`` gets the result once its tensors are computed: at once on CPU/CUDA, after this
    step's graph ran on XLA (a step closure, registered before the step is cut). ``progress`` is
    told what the host is about to wait for (the step watchdog names it if the wait never ends).
    """
    b = t.backend
    ddp = isinstance(t.model, nn.parallel.DistributedDataParallel)
    # Started from the first loss, not a zeros tensor made before the first batch: on XLA that
    # tensor would be cut into a graph of its own by the loader's sync (one more execution).
    running: torch.Tensor | None = None
    position = None
    for micro in range(t.grad_accum):
        last = micro == t.grad_accum - 1
        if progress:
            progress(f"micro-batch {micro + 1}/{t.grad_accum} from the data loader")
        batch = next(batches)
        position = batch.pop("data_position", None)
        if progress:
            # DDP broadcasts rank 0's buffers in every forward, all-reduces in the last backward.
            collectives = " (with DDP's buffer broadcast" + (" and gradient all-reduce)" if last else ")")
            progress(
                f"micro-batch {micro + 1}/{t.grad_accum} forward and backward{collectives if ddp else ''}"
            )
        # DDP all-reduces gradients only in the last micro-batch's backward.
        with b.no_sync(t.model, last), b.autocast(t.precision):
            loss = t.model(batch) / t.grad_accum
        loss.backward()
        running = loss.detach().float() if running is None else running + loss.detach().float()
    assert running is not None  # grad_accum >= 1
    if progress:
        progress("gradient all-reduce, clipping and optimizer update")
    b.reduce_gradients(t.model_params)  # XLA: one all-reduce after accumulation
    if t.master:
        t.master.grads_to_master()
    grad_norm = torch.nn.utils.clip_grad_norm_(t.opt_params, t.max_grad_norm)
    lr = float(t.scheduler.get_last_lr()[0])  # LambdaLR over a float base rate: a Python float
    t.optimizer.step()
    t.scheduler.step()
    t.optimizer.zero_grad(set_to_none=True)
    if t.master:
        t.module.zero_grad(set_to_none=True)
        t.master.master_to_model()
    if progress:
        progress("loss all-reduce and report")
    loss = b.all_reduce_mean(running)
    scalars = torch.stack([loss, grad_norm.detach().float()])
    result = StepResult(loss, grad_norm, lr, position, scalars)
    if report is not None:
        b.defer(report, result)
    if progress:
        progress("graph (XLA mark_step)")
    b.mark_step()
    return result
