"""Throughput, MFU, per-step logging (stdout, JSONL, TensorBoard) and the final metrics file.

Model FLOPs per sequence (forward + backward), as in the brief: ``12 * L * H * S * (6H + S)``.
Derivation per layer and token, forward: Q/K/V/output projections 4*H^2 multiply-adds and
the FFN 2*H*4H, i.e. 12*H^2 MACs = 24*H^2 FLOPs; attention scores and weighted sum 2*S*H
MACs = 4*S*H FLOPs; together 4*H*(6H + S). Backward costs twice the forward, so x3:
12*H*(6H + S) per token and layer. BERT-large, S=128: 12*24*1024*128*(6*1024+128)
= 2.3676e11 FLOPs/sequence, matching the brief's ~2.37e11. It leaves out the embeddings and
the LM head (another ~10% for BERT-large when the head runs on all 128 positions), so the
MFU reported is conservative.

Peak dense BF16 FLOP/s per device (the unit one rank drives):
* Trainium1 NeuronCore-v2: 95e12 — a Trainium chip has 2 NeuronCore-v2 and 190 BF16 TFLOPS
  (Neuron docs, "Trainium Architecture"); trn1.32xlarge: 16 chips, 3,040 TFLOPS.
* NVIDIA A100: 312e12; H100 SXM and H200 (same GH100 compute): 989.4e12; H100 PCIe: 756e12
  (NVIDIA datasheets, dense, without 2:4 sparsity).
* CPU: unknown -> MFU omitted. ``--peak_tflops`` overrides any of these.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

TRN1_NEURONCORE_PEAK_FLOPS = 95e12

# Checked in order; first substring match of torch.cuda.get_device_name() wins.
_CUDA_PEAKS: tuple[tuple[str, float | None], ...] = (
    ("H100 PCIe", 756e12),
    ("H100 NVL", None),  # different clocks; not verified, so no MFU rather than a wrong one
    ("H200 NVL", None),
    ("H100", 989.4e12),
    ("H200", 989.4e12),
    ("A100", 312e12),
)


def model_flops_per_seq(num_layers: int, hidden: int, seq_len: int) -> float:
    """Forward+backward FLOPs of one sequence: 12 * L * H * S * (6H + S)."""
    return 12.0 * num_layers * hidden * seq_len * (6 * hidden + seq_len)


def cuda_peak_flops(device_name: str) -> float | None:
    """Dense BF16 peak of a CUDA device by its name, None if not known."""
    for key, peak in _CUDA_PEAKS:
        if key.lower() in device_name.lower():
            return peak
    return None


def mfu(seq_per_s: float, flops_per_seq: float, peak_per_device: float | None, devices: int) -> float | None:
    """Model FLOPs utilisation in [0, 1], or None when the peak is unknown."""
    if not peak_per_device:
        return None
    return seq_per_s * flops_per_seq / (peak_per_device * devices)


@dataclass
class RunStats:
    """Per-step throughputs of this run, for the final summary."""

    steps: list[int] = field(default_factory=list)
    seq_per_s: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)

    def add(self, step: int, seq_per_s: float, loss: float) -> None:
        self.steps.append(step)
        self.seq_per_s.append(seq_per_s)
        self.losses.append(loss)

    def average_seq_per_s(self) -> float | None:
        # The first step of a run includes graph compilation / warm-up: leave it out when
        # there is anything else to average.
        vals = self.seq_per_s[1:] if len(self.seq_per_s) > 1 else self.seq_per_s
        return sum(vals) / len(vals) if vals else None


class StepLogger:
    """Rank 0's per-step output: one stdout line, a JSONL record, TensorBoard scalars."""

    def __init__(
        self,
        enabled: bool,
        jsonl_path: Path | None,
        tb_dir: str | None,
        restart: int,
        purge_step: int | None = None,
    ) -> None:
        """``purge_step``: on resume, the first step of this run; TensorBoard then hides events
        of that step and later that an interrupted earlier attempt wrote (no duplicate steps)."""
        self.enabled = enabled
        self.jsonl_path = jsonl_path if enabled else None
        self.restart = restart
        self.writer = None
        if enabled and tb_dir:
            from torch.utils.tensorboard import SummaryWriter  # heavy import; rank 0 only

            self.writer = SummaryWriter(log_dir=tb_dir, purge_step=purge_step)

    def log(self, step: int, values: Mapping[str, float | None], group: str = "train") -> None:
        """One line of ``step``; another ``group`` (``eval``) prefixes its names in the line and
        the JSONL record (``eval_mlm_loss``) and is its TensorBoard section (``eval/mlm_loss``)."""
        if not self.enabled:
            return
        prefix = "" if group == "train" else f"{group}_"
        tagged = {f"{prefix}{k}": v for k, v in values.items()}
        parts = [f"step {step}"]
        for k, v in tagged.items():
            if v is None:
                continue
            parts.append(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}")
        print(" | ".join(parts), flush=True)
        if self.jsonl_path is not None:
            # pid tells restarts apart (torchrun's restart count is per node agent).
            record = {
                "step": step,
                "restart": self.restart,
                "pid": os.getpid(),
                "time": time.time(),
                **tagged,
            }
            with open(self.jsonl_path, "a") as f:
                f.write(json.dumps(record) + "\n")
        if self.writer is not None:
            for k, v in values.items():
                if isinstance(v, int | float):
                    self.writer.add_scalar(f"{group}/{k}", v, step)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.flush()
            self.writer.close()


def summary(
    stats: RunStats,
    *,
    start_step: int,
    end_step: int,
    wall_s: float,
    global_batch: int,
    flops_per_seq: float,
    peak_per_device: float | None,
    world_size: int,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The final metrics of this run (what ``--metrics_file`` holds)."""
    avg = stats.average_seq_per_s()
    peak = max(stats.seq_per_s) if stats.seq_per_s else None
    return {
        "start_step": start_step,
        "end_step": end_step,
        "steps_this_run": end_step - start_step,
        "global_batch": global_batch,
        "sequences_this_run": (end_step - start_step) * global_batch,
        "time_to_train_s": wall_s,
        "average_seq_per_s": avg,
        "peak_seq_per_s": peak,
        "average_mfu": mfu(avg, flops_per_seq, peak_per_device, world_size) if avg else None,
        "final_loss": stats.losses[-1] if stats.losses else None,
        "model_flops_per_seq": flops_per_seq,
        "peak_flops_per_device": peak_per_device,
        "world_size": world_size,
        **(extra or {}),
    }
