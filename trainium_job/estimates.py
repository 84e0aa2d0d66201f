"""What a job is expected to take: the published figures, the time to its first step, its cost and
the default spend ceiling derived from them. Standard library only: the review at synth, the
job's deadlines and the pods read the same figures.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

#: neuron_parallel_compile of BERT-large phase 1 into an empty cache set (the Neuron BERT pretraining
#: tutorial's figure, "about 15 minutes"); a cache set that holds the graphs takes none of it.
PRECOMPILE_MINUTES: Final = 15
#: The driver check and the fabric check before training (the fabric check's all-reduce: seconds;
#: its rendezvous and torch-xla start-up: under a minute on the offline rehearsal's CPU stand-ins).
CHECKS_MINUTES: Final = 1
#: Published BERT-large phase-1 throughput per node (sequences/s): Neuron 2.28, trn1.32xlarge,
#: BF16, AdamW, global batch 16,384 (Neuron performance page). Other types: not published.
PUBLISHED_SEQ_PER_S_PER_NODE: Final = {"trn1.32xlarge": 3826.6}
#: Tokens per sequence of :data:`PUBLISHED_SEQ_PER_S_PER_NODE` (phase 1).
PUBLISHED_SEQ_LEN: Final = 128
#: What the reference's 2-node EKS walkthrough logged.
WALKTHROUGH_SEQ_PER_S_2_NODES: Final = 6450.0
#: The default spend ceiling is the estimate at the slower of the rates above times this, so that
#: a healthy default run never meets it: the walkthrough's 2-node run logged 16% under the
#: published rate; the margin covers that much again, a restart or two and the nodes' minutes
#: before and after the pods that the job's own count does not see.
BUDGET_MARGIN: Final = 1.5
#: The default ceiling is rounded up to this many dollars.
BUDGET_ROUNDING_USD: Final = 100
#: MLPerf Training's BERT target, a reference only: mlcommons/training
#: ``language_model/tensorflow/bert/README.md`` (commit dc72f48cc5279f80e8e1736d0756c83f9e3cf116),
#: "Stopping criteria": "A valid submission will evaluate a masked lm accuracy >= 0.720", on "the
#: 10,000 samples in the evaluation set" it makes from its own held-out Wikipedia text (seq 512,
#: 76 predictions, seed 12345). The model card and the synth review show it beside a phase 2's.
MLPERF_MLM_ACCURACY: Final = 0.720
MLPERF_SOURCE: Final = (
    'mlcommons/training, `language_model/tensorflow/bert/README.md`, "Stopping criteria": masked-LM '
    "accuracy >= 0.720 on the 10,000 samples of its own evaluation set (seq 512, 76 predictions)"
)


@dataclass(frozen=True)
class Rate:
    """One throughput figure for a job: sequences per second of the whole job, and its source."""

    label: str
    seq_per_s: float


def rates(instance_type: str, nodes: int, seq_len: int) -> list[Rate]:
    """The published rates for ``nodes`` x ``instance_type`` at ``seq_len`` tokens (counted at
    the same tokens per second as the published 128: attention grows faster, so the time they
    give is a lower bound for longer sequences); empty without a published figure."""
    per_node = PUBLISHED_SEQ_PER_S_PER_NODE.get(instance_type)
    if per_node is None:
        return []
    scale = PUBLISHED_SEQ_LEN / seq_len
    found = [Rate(f"published {per_node:,.1f} seq/s/node", per_node * nodes * scale)]
    if instance_type == "trn1.32xlarge" and nodes == 2:
        found.append(Rate("walkthrough's 2-node EKS run", WALKTHROUGH_SEQ_PER_S_2_NODES * scale))
    if scale != 1:
        found = [
            Rate(f"{r.label}, at its tokens/s for {seq_len} tokens: a lower bound on the time", r.seq_per_s)
            for r in found
        ]
    return found


@dataclass(frozen=True)
class PhaseWork:
    """One phase's sequences and their length."""

    sequences: int
    seq_len: int


def job_hours(
    instance_type: str, nodes: int, phases: Sequence[PhaseWork], *, start_minutes: float
) -> float | None:
    """Hours the job's nodes run: each phase at the slowest published rate, its precompile, and
    ``start_minutes`` once (the nodes' launch, image pull and checks); None without a rate."""
    hours = start_minutes / 60
    for phase in phases:
        found = rates(instance_type, nodes, phase.seq_len)
        if not found:
            return None
        slowest = min(r.seq_per_s for r in found)
        hours += phase.sequences / slowest / 3600 + PRECOMPILE_MINUTES / 60
    return hours


def default_budget_usd(hours: float, *, nodes: int, usd_per_node_hour: float) -> int:
    """The default spend ceiling: the estimate times :data:`BUDGET_MARGIN`, rounded up."""
    usd = hours * nodes * usd_per_node_hour * BUDGET_MARGIN
    return int(math.ceil(usd / BUDGET_ROUNDING_USD) * BUDGET_ROUNDING_USD)


def precompile_usd(*, nodes: int, usd_per_node_hour: float) -> float:
    """What one precompile into an empty cache set costs on the job's nodes: the least a ceiling
    must allow for a run to reach its first step."""
    return PRECOMPILE_MINUTES / 60 * nodes * usd_per_node_hour
