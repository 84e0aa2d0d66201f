"""Distributed on XLA: what torch-xla's CPU runtime allows.

PJRT_DEVICE=CPU cannot join processes: torch-xla 2.9 builds the CPU client with no
coordinator (``InitializePjRt`` in torch_xla/csrc/runtime/pjrt_registry.cc calls
``GetTfrtCpuClient(async, cpu_device_count)``; the CUDA and plugin branches create an
``XlaCoordinator``), and ``pjrt.initialize_multiprocess`` configures only TPU, Neuron and
plugins. Under torchrun each process is then a world of 1, so the ``xla`` process group
(``init_method="xla://"`` takes the world from the runtime) would reduce over one process:
the training script must refuse that, and does. What one process allows is tested below:
the collectives run inside the step's graph, once per optimizer step.
"""

from __future__ import annotations

import subprocess

import torch
import torch_xla.core.xla_model as xm

from tests.xla.conftest import PYTHON, REPO, child_env, free_port, tiny_args
from training.trainer.data import ShardStream, list_shards, make_loader
from training.trainer.device import XlaBackend
from training.trainer.model import build_model
from training.trainer.step import make_step_state, optimizer_step


def test_given_two_processes_on_pjrt_cpu_then_the_run_stops_before_training_naming_both_worlds(
    shards, tmp_path
):
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            PYTHON,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            "2",
            "--master_port",
            str(free_port()),
            "-m",
            "training.trainer.pretrain",
            *tiny_args(shards, out),
        ],
        cwd=REPO,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode != 0
    assert "WORLD_SIZE=2 (torchrun) but the XLA runtime (PJRT_DEVICE=CPU) joins 1 device(s)" in proc.stderr
    # Pre-flight has made (and proven writable) the output directories; nothing was written into them.
    assert not (out / "train_log.jsonl").exists() and list((out / "checkpoints").iterdir()) == []


class Recorder:
    """Order of model forwards and all-reduces (what each reduces) during a step."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def forward_hook(self, *_):
        self.events.append("forward")

    def wrap(self, all_reduce):
        def recorded(reduce_type, inputs, *args, **kwargs):
            self.events.append("all_reduce")
            return all_reduce(reduce_type, inputs, *args, **kwargs)

        return recorded


def one_step(shards, world_size: int, recorder: Recorder | None = None):
    torch.manual_seed(3)
    backend = XlaBackend(local_rank=0, rank=0, world_size=world_size)  # no process group here
    module = backend.prepare_model(build_model("tiny", vocab_size=shards.vocab_size, attn="eager"), "fp32")
    module.eval()  # no dropout: both calls compute the same values
    step_state = make_step_state(
        backend,
        module,
        precision="fp32",
        optimizer="adamw",
        lr=1e-3,
        weight_decay=0.01,
        warmup_steps=1,
        max_steps=2,
        grad_accum=3,
        max_grad_norm=1e9,
    )
    stream = ShardStream(list_shards(str(shards.dir)), batch_size=2, seq_len=128, max_pred_len=20, seed=5)
    if recorder is not None:
        module.register_forward_hook(recorder.forward_hook)
    result = optimizer_step(step_state, backend.batches(make_loader(stream)))
    return result.loss.item(), result.grad_norm.item(), len(step_state.model_params)


def test_given_world_of_two_then_one_gradient_all_reduce_per_optimizer_step_inside_the_graph(
    shards, monkeypatch
):
    # xm.all_reduce returns its input untouched when the runtime's world is 1, unless this is set.
    monkeypatch.setenv("XLA_ALWAYS_ALLREDUCE", "1")
    recorder = Recorder()
    monkeypatch.setattr(xm, "all_reduce", recorder.wrap(xm.all_reduce))
    loss2, norm2, n_params = one_step(shards, world_size=2, recorder=recorder)
    # 3 micro-batches, then each gradient reduced once, then the logged loss's mean: nothing
    # between micro-batches (that would be one all-reduce per micro-step).
    assert recorder.events == ["forward"] * 3 + ["all_reduce"] * (n_params + 1)
    recorder.events.clear()
    loss1, norm1, _ = one_step(shards, world_size=1, recorder=recorder)
    assert recorder.events == ["forward"] * 3  # a world of 1 reduces nothing
    # The runtime's world is this one process, so the reduction sums one replica and applies
    # the 1/2 scale: proof that the collective ran in the graph with the rank-averaging scale.
    assert abs(loss2 - loss1 / 2) < 1e-5 * loss1
    assert abs(norm2 - norm1 / 2) < 1e-4 * norm1
