"""Graceful stop budget (``training.trainer.stop``): the time a worker gets between SIGTERM and SIGKILL,
the time it needs, and the pod's grace period.

The window is torchrun's, not ours: on SIGTERM torchrun's agent sends SIGTERM to its workers and
SIGKILLs them 30 s later. In the image's torch (2.9.0) that wait is a fixed default argument
(``PContext.close(..., timeout: int = 30)`` in ``torch/distributed/elastic/multiprocessing/
api.py``, called without a timeout by ``LocalElasticAgent._shutdown``); no variable or flag
changes it (``--shutdown-timeout`` / ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT`` arrived with
pytorch/pytorch#172596, torch 2.12). So the workers must finish their step and write their
state within 30 s; the pod's grace period only has to outlast torchrun.
"""

from __future__ import annotations

#: torchrun's wait between its workers' SIGTERM and SIGKILL in the image's torch 2.9.0.
TORCHRUN_SHUTDOWN_S = 30
#: Time the kubelet leaves torchrun after its workers' deadline, to exit by itself.
AGENT_EXIT_MARGIN_S = 15
#: BERT-large (``BertForPreTraining``, bert-large-uncased config, tied embeddings once); printed
#: by ``python -m bench.bench_checkpoint``.
BERT_LARGE_PARAMETERS = 336_226_108
#: Checkpoint bytes per parameter: the XLA default, bf16 weights and AdamW moments with
#: stochastic rounding, saves 6; fp32 weights + two fp32 moments (``--precision fp32``, or bf16
#: with ``--fp32_master_weights``) save 12.
BF16_STATE_BYTES_PER_PARAMETER = 6
FP32_STATE_BYTES_PER_PARAMETER = 12
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


def fsx_write_bytes_per_s(storage_gib: int, mb_s_per_tib: int) -> float:
    """Baseline throughput of an FSx for Lustre file system: capacity (TiB) x per-TiB throughput."""
    return storage_gib / 1024 * mb_s_per_tib * 1e6


def stop_need_s(
    *,
    fp32_state: bool = False,
    storage_gib: int = DEFAULT_FSX_STORAGE_GIB,
    mb_s_per_tib: int = DEFAULT_FSX_MB_S_PER_TIB,
    step_s: float = STEP_S,
) -> float:
    """Seconds a BERT-large worker needs after SIGTERM: finish its step, then write its state.

    Defaults (bf16 state): 2,017,356,648 bytes / 146.5 MB/s = 13.8 s + a 4.3 s step = 18.1 s;
    an fp32 state (4.03 GB) takes 27.5 s + 4.3 s = 31.8 s on the default FSx.
    """
    per_parameter = FP32_STATE_BYTES_PER_PARAMETER if fp32_state else BF16_STATE_BYTES_PER_PARAMETER
    state_bytes = BERT_LARGE_PARAMETERS * per_parameter
    return step_s + state_bytes / fsx_write_bytes_per_s(storage_gib, mb_s_per_tib)


def stop_problem(
    *,
    fp32_state: bool,
    storage_gib: int = DEFAULT_FSX_STORAGE_GIB,
    mb_s_per_tib: int = DEFAULT_FSX_MB_S_PER_TIB,
    step_s: float = STEP_S,
) -> str | None:
    """Why the stop checkpoint cannot be written within torchrun's window, or None when it can."""
    need = stop_need_s(
        fp32_state=fp32_state, storage_gib=storage_gib, mb_s_per_tib=mb_s_per_tib, step_s=step_s
    )
    if need <= TORCHRUN_SHUTDOWN_S:
        return None
    state = "fp32" if fp32_state else "bf16"
    return (
        f"the BERT-large {state} state takes {need:.0f} s to write after SIGTERM (one step + the state "
        f"at {fsx_write_bytes_per_s(storage_gib, mb_s_per_tib) / 1e6:.0f} MB/s), more than the "
        f"{TORCHRUN_SHUTDOWN_S} s torchrun gives its workers before SIGKILL: a stop (drain, eviction, "
        "preemption) resumes from the last periodic checkpoint instead"
    )


def termination_grace_period_s() -> int:
    """The pod's ``terminationGracePeriodSeconds``: torchrun's window plus its own exit."""
    return TORCHRUN_SHUTDOWN_S + AGENT_EXIT_MARGIN_S
