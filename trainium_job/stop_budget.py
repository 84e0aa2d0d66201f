"""Graceful stop budget (``training.stop``): what a training pod needs between SIGTERM and SIGKILL."""

from __future__ import annotations

import math
from typing import Any

#: BERT-large (``BertForPreTraining``, bert-large-uncased config, tied embeddings once); printed
#: by ``python -m bench.bench_checkpoint``.
BERT_LARGE_PARAMETERS = 336_226_108
#: Checkpoint bytes per parameter at most: fp32 weights + AdamW's two fp32 moments (fp32, or bf16
#: with --fp32_master_weights). The XLA default, bf16 with stochastic rounding, saves 6.
STATE_BYTES_PER_PARAMETER = 12
#: The platform's default file system: FSx for Lustre PERSISTENT_2, 1200 GiB at 125 MB/s/TiB
#: (``trainium_eks.config`` defaults). Its throughput is capacity (TiB) x per-unit throughput
#: (FSx API reference, LustreFileSystemConfiguration.PerUnitStorageThroughput): 146.5 MB/s.
#: FSx bursts above that for reads only (FSx for Lustre User Guide, "Performance
#: characteristics of SSD and HDD storage classes"), so a write gets the baseline.
DEFAULT_FSX_STORAGE_GIB = 1200
DEFAULT_FSX_MB_S_PER_TIB = 125
#: One reference optimizer step (global batch 16,384) on ONE trn1.32xlarge at the published
#: 3,826.6 seq/s (Neuron 2.28): 4.3 s; more nodes finish it sooner.
STEP_S = 16384 / 3826.6
#: Headroom over (finish the step + write the state): FSx is shared with the data reads, and the
#: digests are hashed alongside the write (~1 GB/s per core, BENCHMARKS.md, far above 146.5 MB/s).
STOP_HEADROOM = 2.0
#: Time the kubelet leaves torchrun after its workers' deadline, to exit by itself.
AGENT_EXIT_MARGIN_S = 15


def stop_budget_s(
    *,
    state_bytes: float = BERT_LARGE_PARAMETERS * STATE_BYTES_PER_PARAMETER,
    storage_gib: int = DEFAULT_FSX_STORAGE_GIB,
    mb_s_per_tib: int = DEFAULT_FSX_MB_S_PER_TIB,
    step_s: float = STEP_S,
) -> int:
    """Seconds a worker needs after SIGTERM: ``ceil(headroom x (step + state / FSx throughput))``.

    Defaults: 4,034,713,296 bytes / (1200/1024 TiB x 125 MB/s/TiB = 146.5 MB/s) = 27.5 s, plus
    a 4.3 s step, x2 = 64 s. torchrun waits this long before SIGKILLing its workers
    (``TORCH_ELASTIC_SHUTDOWN_TIMEOUT``, read by torch >= 2.12; older torchrun waits 30 s,
    enough for the 2.0 GB bf16 default: 2 x (13.8 s + 4.3 s) = 37 s is the budget, 18 s the need).
    """
    fs_bytes_per_s = storage_gib / 1024 * mb_s_per_tib * 1e6
    return math.ceil(STOP_HEADROOM * (step_s + state_bytes / fs_bytes_per_s))


def termination_grace_period_s(**budget: Any) -> int:
    """The pod's ``terminationGracePeriodSeconds``: the workers' budget plus torchrun's exit."""
    return stop_budget_s(**budget) + AGENT_EXIT_MARGIN_S
