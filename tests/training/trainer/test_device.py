"""Device selection, precision modes, the XLA layer's torch_xla-free parts, MFU arithmetic."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from tests.training.conftest import child_env
from training.trainer.device import (
    Backend,
    XlaBackend,
    make_backend,
    move_keeping_ties,
    resolve_log_every,
    resolve_precision,
    select_device,
)
from training.trainer.metrics import cuda_peak_flops, mfu, model_flops_per_seq
from training.trainer.model import build_model

YES, NO = (lambda: True), (lambda: False)


@pytest.mark.parametrize(
    ("neuron", "xla", "pjrt", "cuda", "expected"),
    [
        (YES, YES, None, YES, "xla"),  # torch-neuronx wins
        (NO, YES, "NEURON", NO, "xla"),  # torch_xla with a PJRT device named
        (NO, YES, None, YES, "cuda"),  # a stray torch_xla wheel does not steal a GPU box
        (NO, NO, None, YES, "cuda"),
        (NO, NO, None, NO, "cpu"),
    ],
)
def test_given_installed_stacks_then_auto_picks_device(monkeypatch, neuron, xla, pjrt, cuda, expected):
    if pjrt:
        monkeypatch.setenv("PJRT_DEVICE", pjrt)
    else:
        monkeypatch.delenv("PJRT_DEVICE", raising=False)
    assert select_device("auto", has_xla=xla, has_neuron=neuron, has_cuda=cuda) == expected


def test_given_explicit_device_missing_then_clear_error():
    with pytest.raises(RuntimeError, match="torch_xla is not installed"):
        select_device("xla", has_xla=NO)
    with pytest.raises(RuntimeError, match="no CUDA device"):
        select_device("cuda", has_cuda=NO)
    with pytest.raises(ValueError, match="device"):
        select_device("tpu")
    assert select_device("cpu", has_cuda=YES) == "cpu"


def test_given_this_machine_then_auto_is_cpu_and_xla_is_refused():
    # No torch_xla, torch-neuronx or GPU here: the real predicates must say so.
    assert select_device("auto") == "cpu"
    with pytest.raises(RuntimeError, match="torch_xla"):
        select_device("xla")


def test_given_device_then_default_precision_and_master_weight_rule():
    assert resolve_precision("xla", "auto") == "bf16"
    assert resolve_precision("cuda", "auto") == "amp_bf16"
    assert resolve_precision("cpu", "auto") == "fp32"
    assert resolve_precision("xla", "auto", fp32_master_weights=True) == "bf16"
    with pytest.raises(ValueError, match="fp32_master_weights"):
        resolve_precision("cuda", "auto", fp32_master_weights=True)
    with pytest.raises(ValueError, match="precision"):
        resolve_precision("cpu", "fp16")


def test_given_xla_bf16_then_stochastic_rounding_enabled_unless_master_weights(monkeypatch):
    monkeypatch.delenv("NEURON_RT_STOCHASTIC_ROUNDING_EN", raising=False)
    backend = make_backend("xla", 0, 0, 1)
    assert isinstance(backend, XlaBackend) and backend.dist_backend == "xla"
    backend.configure_precision("bf16", fp32_master_weights=True)
    assert "NEURON_RT_STOCHASTIC_ROUNDING_EN" not in __import__("os").environ
    backend.configure_precision("bf16", fp32_master_weights=False)
    assert __import__("os").environ["NEURON_RT_STOCHASTIC_ROUNDING_EN"] == "1"
    monkeypatch.setenv("NEURON_RT_STOCHASTIC_ROUNDING_EN", "0")  # the user's choice wins
    backend.configure_precision("bf16", fp32_master_weights=False)
    assert __import__("os").environ["NEURON_RT_STOCHASTIC_ROUNDING_EN"] == "0"
    assert backend.peak_flops() == 95e12 and backend.attn_implementation == "eager"


def test_given_no_torch_xla_then_device_module_imports_and_xla_fails_only_when_used():
    code = (
        "import sys; sys.modules['torch_xla'] = None\n"
        "from training.trainer.device import make_backend\n"
        "b = make_backend('xla', 0, 0, 1)\n"
        "b.configure_precision('bf16', False)\n"
        "try:\n    b.mark_step()\nexcept ImportError as e:\n    print('lazy import failed as expected')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=child_env(), check=True
    )
    assert out.stdout.strip() == "lazy import failed as expected"


def test_given_cpu_backend_then_single_process_operations_are_identities():
    b = make_backend("cpu", 0, 0, 1)
    assert type(b) is Backend and b.dist_backend == "gloo" and b.device == torch.device("cpu")
    t = torch.tensor(3.0)
    assert b.all_reduce_mean(t) is t
    model = torch.nn.Linear(2, 2)
    assert b.wrap_model(model) is model
    calls = []
    b.defer(lambda x: calls.append(x), 5)
    assert calls == [5] and b.peak_flops() is None
    with b.autocast("amp_bf16"):
        assert model(torch.ones(1, 2)).dtype == torch.bfloat16
    with b.autocast("fp32"):
        assert model(torch.ones(1, 2)).dtype == torch.float32
    assert b.prepare_model(torch.nn.Linear(2, 2), "bf16").weight.dtype == torch.bfloat16


def test_given_bert_large_then_brief_flops_per_sequence():
    # 12 * 24 * 1024 * 128 * (6 * 1024 + 128)
    assert model_flops_per_seq(24, 1024, 128) == 236_760_072_192
    assert model_flops_per_seq(24, 1024, 128) == pytest.approx(2.37e11, rel=2e-3)


def test_given_device_names_then_peaks_and_mfu():
    assert cuda_peak_flops("NVIDIA A100-SXM4-80GB") == 312e12
    assert cuda_peak_flops("NVIDIA H100 80GB HBM3") == 989.4e12
    assert cuda_peak_flops("NVIDIA H100 PCIe") == 756e12
    assert cuda_peak_flops("NVIDIA H200") == 989.4e12
    assert cuda_peak_flops("NVIDIA H100 NVL") is None
    assert cuda_peak_flops("Tesla T4") is None
    # Published trn1.32xlarge figure: 3,826.6 seq/s on 32 NeuronCores at 95 TFLOP/s each.
    assert mfu(3826.6, model_flops_per_seq(24, 1024, 128), 95e12, 32) == pytest.approx(0.298, abs=1e-3)
    assert mfu(100.0, 1e9, None, 1) is None


def test_given_tied_bert_when_moved_to_a_device_that_makes_new_parameters_then_ties_are_kept():
    # "meta", like an XLA device, makes Module.to create a new Parameter per attribute.
    hf = build_model("tiny", vocab_size=100).to("meta").hf_model
    assert hf.cls.predictions.decoder.weight is not hf.bert.embeddings.word_embeddings.weight
    module = build_model("tiny", vocab_size=100)
    count = len(list(module.parameters()))
    hf = move_keeping_ties(module, torch.device("meta")).hf_model
    assert hf.cls.predictions.decoder.weight is hf.bert.embeddings.word_embeddings.weight
    assert hf.cls.predictions.decoder.bias is hf.cls.predictions.bias
    assert hf.bert.embeddings.word_embeddings.weight.device.type == "meta"
    assert len(list(hf.parameters())) == count


def test_given_log_every_zero_then_device_default_else_as_given():
    assert resolve_log_every("xla", 0) == 10 and resolve_log_every("cpu", 0) == 1
    assert resolve_log_every("xla", 3) == 3
    with pytest.raises(ValueError, match="log_every: -1"):
        resolve_log_every("cpu", -1)
