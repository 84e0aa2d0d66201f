"""Optimizers (AdamW, LAMB), parameter groups, LR schedule, fp32 master weights.

LAMB is ours: torch-optimizer (last release 0.3.0, 2021) is unmaintained, and the maintained
pytorch-optimizer (4.x) per-tensor path branches on tensor values on the host
(``if weight_norm == 0 ...``), a device->host sync per parameter on XLA, and clamps the
weight norm at 10 by default. Ours follows You et al. 2019 ("Large Batch Optimization for
Deep Learning: Training BERT in 76 minutes", Algorithm 2) with phi = identity and uses
``torch.where`` so nothing waits for the device.

Parameters without weight decay (biases, LayerNorm) get trust ratio 1, i.e. a plain Adam step.
The paper applies the ratio to every layer; the implementations behind the published BERT LAMB
results do not: NVIDIA apex ``FusedLAMB`` (used by NVIDIA's BERT recipe) documents
``use_nvlamb`` as "Apply adaptive learning rate to 0.0 weight decay parameter (default: False)",
and TensorFlow Addons' ``LAMB`` defaults ``exclude_from_layer_adaptation`` to the
weight-decay exclusions. We follow them. The choice is per parameter group on the host (a
Python float), so it adds no device work.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR

from .cli import OPTIMIZERS

BETAS = (0.9, 0.999)
# BERT's original optimizer used eps=1e-6; so do the Neuron and NVIDIA BERT recipes.
EPS = 1e-6


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two groups: with weight decay, and without it for biases and LayerNorm parameters."""
    no_decay_ids: set[int] = set()
    for module in model.modules():
        if isinstance(module, nn.LayerNorm):
            no_decay_ids.update(id(p) for p in module.parameters(recurse=False))
    decay, no_decay = [], []
    for name, p in model.named_parameters():  # shared (tied) parameters are listed once
        if not p.requires_grad:
            continue
        if name.endswith("bias") or id(p) in no_decay_ids:
            no_decay.append(p)
        else:
            decay.append(p)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


class Lamb(Optimizer):
    """LAMB (You et al. 2019, Algorithm 2), per-tensor trust ratio, phi = identity.

    For each parameter tensor x with gradient g at step t::

        m = b1*m + (1-b1)*g ;  v = b2*v + (1-b2)*g^2
        r = (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
        u = r + wd*x
        x = x - lr * (||x|| / ||u||) * u        (ratio 1 where ||x|| or ||u|| is 0,
                                                 and for groups with wd = 0: see the module doc)
    """

    def __init__(
        self,
        params: Iterable,
        lr: float = 1e-3,
        betas: tuple[float, float] = BETAS,
        eps: float = EPS,
        weight_decay: float = 0.0,
    ) -> None:
        if lr <= 0 or eps <= 0 or weight_decay < 0 or not all(0 <= b < 1 for b in betas):
            raise ValueError(f"Lamb: invalid lr={lr}, eps={eps}, weight_decay={weight_decay}, betas={betas}")
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure=None):  # noqa: D102 - torch.optim API
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
                t = state["step"]
                m, v = state["exp_avg"], state["exp_avg_sq"]
                g = p.grad
                m.mul_(beta1).add_(g, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
                update = (m / (1 - beta1**t)) / ((v / (1 - beta2**t)).sqrt_().add_(group["eps"]))
                if not group["weight_decay"]:
                    p.add_(update, alpha=-group["lr"])
                    continue
                update.add_(p, alpha=group["weight_decay"])
                w_norm = torch.linalg.vector_norm(p)
                u_norm = torch.linalg.vector_norm(update)
                ratio = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, torch.ones_like(w_norm))
                p.add_(update * ratio, alpha=-group["lr"])
        return loss


def build_optimizer(name: str, groups: list[dict], lr: float) -> Optimizer:
    """AdamW (torch) or LAMB (ours) over ``groups`` (see ``param_groups``)."""
    if name == "adamw":
        return torch.optim.AdamW(groups, lr=lr, betas=BETAS, eps=EPS)
    if name == "lamb":
        return Lamb(groups, lr=lr, betas=BETAS, eps=EPS)
    raise ValueError(f"optimizer: {name!r} is not one of {', '.join(OPTIMIZERS)}")


def warmup_linear_decay(step: int, warmup_steps: int, total_steps: int) -> float:
    """LR factor for 0-based update ``step``: linear warmup to 1, then linear decay.

    Update u = step + 1 gets u / warmup during warmup (peak at u = warmup), then
    (total + 1 - u) / (total - warmup): the peak again at u = warmup + 1, falling to
    1 / (total - warmup) at u = total. It never reaches 0: a zero LR would waste an update
    (and, on XLA, a 0 scalar is a special constant that compiles another graph).
    """
    u = step + 1
    if u <= warmup_steps:
        return u / warmup_steps
    return max(total_steps + 1 - u, 1) / max(total_steps - warmup_steps, 1)


def build_scheduler(optimizer: Optimizer, warmup_steps: int, total_steps: int) -> LambdaLR:
    if warmup_steps < 0 or total_steps < 1 or warmup_steps > total_steps:
        raise ValueError(f"scheduler: need 0 <= warmup_steps ({warmup_steps}) <= max_steps ({total_steps})")
    return LambdaLR(optimizer, lambda s: warmup_linear_decay(s, warmup_steps, total_steps))


def apply_hyperparameters(
    optimizer: Optimizer, scheduler: LambdaLR, *, lr: float, weight_decay: float
) -> None:
    """Make a restored optimizer and schedule follow this run's flags (see ``training.trainer.resume``).

    A checkpoint's optimizer state carries the old peak LR (``initial_lr``, the scheduler's
    ``base_lrs``), the old weight decay and the LR the old schedule set for the next update.
    Replace them, then recompute the next update's LR with this run's schedule (its
    ``lr_lambdas`` are never saved, so they already are this run's warmup and max_steps).
    Unchanged flags give back exactly the restored values. Group 0 is the weight-decay group
    of ``param_groups``; group 1 keeps 0.
    """
    optimizer.param_groups[0]["weight_decay"] = weight_decay
    scheduler.base_lrs = [lr] * len(optimizer.param_groups)
    for group, fn in zip(optimizer.param_groups, scheduler.lr_lambdas, strict=True):
        group["initial_lr"] = lr
        group["lr"] = lr * fn(scheduler.last_epoch)
    scheduler._last_lr = [g["lr"] for g in optimizer.param_groups]  # what get_last_lr() reports


class MasterWeights:
    """fp32 copies of a low-precision model's parameters for the optimizer to update.

    Used with a bf16 model when stochastic rounding is not wanted (the Neuron "BF16 in
    GPU-compatible mode": fp32 weights and optimizer state, bf16 compute). The optimizer is
    built over ``groups``; each step: ``grads_to_master()``, clip + optimizer step on the
    master copies, ``master_to_model()``.
    """

    def __init__(self, groups: list[dict]) -> None:
        self.pairs: list[tuple[nn.Parameter, torch.Tensor]] = []
        self.groups: list[dict] = []
        for group in groups:
            masters = []
            for p in group["params"]:
                master = p.detach().clone().float().requires_grad_(True)
                self.pairs.append((p, master))
                masters.append(master)
            self.groups.append({**group, "params": masters})

    @property
    def params(self) -> list[torch.Tensor]:
        return [m for _, m in self.pairs]

    def grads_to_master(self) -> None:
        for p, m in self.pairs:
            m.grad = None if p.grad is None else p.grad.float()

    @torch.no_grad()
    def master_to_model(self) -> None:
        for p, m in self.pairs:
            p.copy_(m)

    @torch.no_grad()
    def load_from_model_state(self, state: dict[str, torch.Tensor], names: list[str]) -> None:
        """Refill the masters from an fp32 state dict (``names`` in ``pairs`` order)."""
        for (_, m), name in zip(self.pairs, names, strict=True):
            m.copy_(state[name])
