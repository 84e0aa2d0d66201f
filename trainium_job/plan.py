"""What a job spec works out to on a nodegroup: workers and gradient accumulation."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from . import checks
from .errors import ConfigError
from .fabric_check_steps import busbw_ceiling_gbps
from .instances import InstanceFacts
from .spec import BertJobSpec, context_key


@dataclass(frozen=True)
class TrainingPlan:
    """The job's shape (validated, no CDK involved).

    ``grad_accum_usteps = global_batch / (batch_size x workers)``; the reference's 2 x
    trn1.32xlarge recipe: 64 workers, 16 x 64 x 16 = 16,384.
    """

    nodes: int
    nproc_per_node: int
    batch_size: int
    global_batch: int

    @property
    def workers(self) -> int:
        return self.nodes * self.nproc_per_node

    @property
    def grad_accum_usteps(self) -> int:
        return self.global_batch // (self.batch_size * self.workers)


# Cached: the config's checks, its review and the job construct ask for the same plan in one synth.
@functools.lru_cache(maxsize=64)
def plan_training(spec: BertJobSpec, *, facts: InstanceFacts, nodes: int, max_nodes: int) -> TrainingPlan:
    """Resolve ``nproc_per_node`` and check the shape; ConfigError naming the context key otherwise.

    ``nodes`` is the job's pod count (context key ``desired_nodes``), ``max_nodes`` the
    nodegroup's maximum.
    """
    nproc = spec.nproc_per_node or facts.neuron_cores
    checks.whole_number("desired_nodes", nodes, minimum=1)
    if nproc > facts.neuron_cores:
        raise ConfigError(
            context_key("nproc_per_node"),
            nproc,
            f"{facts.name} has {facts.neuron_cores} NeuronCores; use at most that",
        )
    if nodes > max_nodes:
        raise ConfigError(
            "desired_nodes",
            nodes,
            f"the Trainium nodegroup's maximum is {max_nodes}; raise max_nodes or use fewer",
        )
    if nodes > 1 and not facts.multi_node:
        raise ConfigError(
            "desired_nodes",
            nodes,
            f"{facts.name} has no EFA for multi-node training; use 1 node or a 32xlarge/48xlarge type",
        )
    plan = TrainingPlan(nodes, nproc, spec.batch_size, spec.global_batch)
    _check_fabric_floor(spec, facts, plan)
    check_accumulation(spec, plan)
    return plan


def check_accumulation(spec: BertJobSpec, plan: TrainingPlan) -> None:
    """``spec``'s global batch is a whole number of micro-batches of ``plan``'s workers."""
    if spec.global_batch % (spec.batch_size * plan.workers):
        raise ConfigError(
            context_key("global_batch"),
            spec.global_batch,
            f"must be a multiple of batch_size x workers = {spec.batch_size} x {plan.workers} "
            f"= {spec.batch_size * plan.workers} (gradient accumulation is a whole number)",
        )


def _check_fabric_floor(spec: BertJobSpec, facts: InstanceFacts, plan: TrainingPlan) -> None:
    """A fabric check floor the instances' network cannot carry would abort every job at its start."""
    if not spec.fabric_check or plan.nodes < 2:
        return
    ceiling = busbw_ceiling_gbps(network_gbps=facts.network_gbps, nodes=plan.nodes, workers=plan.workers)
    if spec.fabric_check_min_busbw_gbps > ceiling:
        raise ConfigError(
            context_key("fabric_check_min_busbw_gbps"),
            spec.fabric_check_min_busbw_gbps,
            f"{plan.nodes} x {facts.name} ({facts.network_gbps:g} Gbps each) carry an all-reduce bus "
            f"bandwidth of at most {ceiling:.1f} GB/s, so every job would stop at its fabric check; use at "
            f"most {int(ceiling)} (a healthy 2-node trn1 run measures about 40: nccom-test's example), "
            "or 0 to measure without a floor",
        )
