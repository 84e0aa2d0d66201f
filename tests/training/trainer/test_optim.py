"""LAMB against the paper's update rule, LR schedule, parameter groups, fp32 master weights."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest
import torch
from torch import nn

from training.trainer.model import build_model
from training.trainer.optim import (
    Lamb,
    MasterWeights,
    build_optimizer,
    build_scheduler,
    param_groups,
    warmup_linear_decay,
)


def lamb_reference(x, grads, lr, b1, b2, eps, wd):
    """You et al. 2019, Algorithm 2 (phi = identity), in float64 numpy, one tensor; as in apex
    FusedLAMB (use_nvlamb=False), no trust ratio for a tensor without weight decay."""
    m = np.zeros_like(x)
    v = np.zeros_like(x)
    for t, g in enumerate(grads, start=1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        m_hat = m / (1 - b1**t)
        v_hat = v / (1 - b2**t)
        r = m_hat / (np.sqrt(v_hat) + eps)
        u = r + wd * x
        xn, un = np.linalg.norm(x), np.linalg.norm(u)
        ratio = xn / un if xn > 0 and un > 0 and wd else 1.0
        x = x - lr * ratio * u
    return x


def test_given_gradients_then_lamb_matches_paper_algorithm_2():
    rng = np.random.default_rng(0)
    shapes = {"w": (7, 5), "b": (5,), "z": (3,)}
    init = {k: rng.normal(size=s) for k, s in shapes.items()}
    init["w2"] = rng.normal(size=(4,))
    init["w2"][:] = 0.0  # zero weight norm: trust ratio 1
    grads_w2 = [rng.normal(size=4) for _ in range(6)]
    steps = 6
    grads = {k: [rng.normal(size=s) for _ in range(steps)] for k, s in shapes.items()}
    grads["z"] = [np.zeros(3) for _ in range(steps)]  # zero update with wd=0: ratio 1, no move
    grads["w2"] = grads_w2
    params = {k: nn.Parameter(torch.tensor(v, dtype=torch.float64)) for k, v in init.items()}
    lr, b1, b2, eps = 0.01, 0.9, 0.999, 1e-6
    opt = Lamb(
        [
            {"params": [params["w"], params["w2"]], "weight_decay": 0.1},
            {"params": [params["b"], params["z"]], "weight_decay": 0.0},
        ],
        lr=lr,
        betas=(b1, b2),
        eps=eps,
    )
    for t in range(steps):
        for k, p in params.items():
            p.grad = torch.tensor(grads[k][t])
        opt.step()
    for k, wd in (("w", 0.1), ("w2", 0.1), ("b", 0.0), ("z", 0.0)):
        expected = lamb_reference(init[k], grads[k], lr, b1, b2, eps, wd)
        np.testing.assert_allclose(params[k].detach().numpy(), expected, rtol=1e-10, atol=1e-12)
    assert not np.allclose(params["w"].detach().numpy(), init["w"])
    np.testing.assert_array_equal(params["z"].detach().numpy(), init["z"])


def test_given_lamb_then_trust_ratio_differs_from_adam_direction():
    # Layer-wise scaling: the step length of each tensor is lr * ||x|| (update normalised).
    p = nn.Parameter(torch.full((100,), 3.0))
    opt = Lamb([p], lr=0.1, weight_decay=0.01)
    p.grad = torch.ones(100) * 1e-3
    before = p.detach().clone()
    opt.step()
    assert torch.linalg.vector_norm(before - p.detach()).item() == pytest.approx(0.1 * 30.0, rel=1e-4)


def test_given_no_weight_decay_group_then_lamb_takes_torch_adams_step():
    # Bias/LayerNorm (wd = 0): trust ratio 1, as apex FusedLAMB's default and TF Addons do.
    rng = np.random.default_rng(1)
    init = rng.normal(size=(6,)) * 5
    lamb_p = nn.Parameter(torch.tensor(init))
    adam_p = nn.Parameter(torch.tensor(init))
    lamb = Lamb([{"params": [lamb_p], "weight_decay": 0.0}], lr=0.01, eps=1e-6)
    adam = torch.optim.Adam([adam_p], lr=0.01, betas=(0.9, 0.999), eps=1e-6)
    for _ in range(5):
        g = torch.tensor(rng.normal(size=(6,)))
        lamb_p.grad, adam_p.grad = g.clone(), g.clone()
        lamb.step(), adam.step()
    np.testing.assert_allclose(lamb_p.detach().numpy(), adam_p.detach().numpy(), rtol=1e-12, atol=1e-12)
    assert not np.allclose(lamb_p.detach().numpy(), init)


def test_given_bad_hyperparameters_then_lamb_refuses():
    with pytest.raises(ValueError):
        Lamb([nn.Parameter(torch.zeros(1))], lr=0)
    with pytest.raises(ValueError, match="optimizer"):
        build_optimizer("sgd", [{"params": [nn.Parameter(torch.zeros(1))]}], 0.1)


def test_given_schedule_then_linear_warmup_then_linear_decay_never_zero():
    warmup, total = 10, 50
    f = [warmup_linear_decay(s, warmup, total) for s in range(total)]
    assert f[0] == pytest.approx(0.1) and f[warmup - 1] == f[warmup] == 1.0
    assert all(b > a for a, b in pairwise(f[:warmup]))  # strictly rising
    assert all(b < a for a, b in zip(f[warmup:-1], f[warmup + 1 :], strict=True))  # strictly falling
    np.testing.assert_allclose(np.diff(f[:warmup]), 1 / warmup)  # linear
    np.testing.assert_allclose(np.diff(f[warmup:]), -1 / (total - warmup))  # linear
    assert f[-1] == pytest.approx(1 / (total - warmup)) and max(f) == 1.0
    assert warmup_linear_decay(0, 0, 5) == 1.0  # no warmup: starts at the peak


def test_given_scheduler_then_lr_follows_factor_per_optimizer_step():
    p = nn.Parameter(torch.zeros(1))
    opt = torch.optim.AdamW([p], lr=4e-4)
    sched = build_scheduler(opt, warmup_steps=2, total_steps=6)
    lrs = []
    for _ in range(6):
        lrs.append(sched.get_last_lr()[0])
        p.grad = torch.ones(1)
        opt.step()
        sched.step()
    assert lrs == pytest.approx([2e-4, 4e-4, 4e-4, 4e-4 * 3 / 4, 4e-4 * 2 / 4, 4e-4 * 1 / 4])
    with pytest.raises(ValueError, match="warmup"):
        build_scheduler(opt, warmup_steps=7, total_steps=6)


def test_given_bert_then_no_weight_decay_on_bias_and_layernorm_only():
    model = build_model("tiny", vocab_size=100)
    decay, no_decay = param_groups(model, 0.01)
    assert decay["weight_decay"] == 0.01 and no_decay["weight_decay"] == 0.0
    names = {id(p): n for n, p in model.named_parameters()}
    decay_names = {names[id(p)] for p in decay["params"]}
    no_decay_names = {names[id(p)] for p in no_decay["params"]}
    assert len(decay_names) + len(no_decay_names) == len(names)  # each parameter once
    assert all(n.endswith("bias") or "LayerNorm" in n for n in no_decay_names)
    assert not any(n.endswith("bias") or "LayerNorm" in n for n in decay_names)
    assert any("LayerNorm.weight" in n for n in no_decay_names)
    assert any("word_embeddings" in n for n in decay_names)


def test_given_bf16_model_with_master_weights_then_small_updates_accumulate_in_fp32():
    model = nn.Linear(4, 4).to(torch.bfloat16)
    groups = param_groups(model, 0.0)
    master = MasterWeights(groups)
    assert all(m.dtype == torch.float32 for m in master.params)
    opt = torch.optim.SGD(master.groups, lr=1.0)
    start = model.weight.detach().float().clone()
    for _ in range(100):  # 100 updates of 1e-4: each alone is below bf16 resolution near 0.5
        for p in model.parameters():
            p.grad = torch.full_like(p, -1e-4)
        master.grads_to_master()
        opt.step()
        master.master_to_model()
    moved = master.pairs[0][1] - start
    torch.testing.assert_close(moved, torch.full_like(moved, 1e-2), rtol=1e-3, atol=1e-5)
    assert model.weight.dtype == torch.bfloat16
    torch.testing.assert_close(model.weight.detach(), master.pairs[0][1].to(torch.bfloat16))
