"""The BERT pretraining job rendered from its spec: its phases' torchrun commands and waits, as a
gang of the library's training pods (:mod:`trainium_job.gang`).

The CDK construct applies :func:`render_job`'s manifest; the TorchX component builds its role
from :func:`launch_spec` and :func:`~trainium_job.pod.pod_template`, so both run one command.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from .errors import ConfigError
from .fabric_check_steps import FabricCheck
from .gang import SERVICE_ACCOUNT, Gang, RenderedJob, render_gang
from .instances import InstanceFacts
from .launch import LaunchSpec, script_args_from_dict
from .phases import TrainingPhases, as_phases
from .plan import TrainingPlan, check_accumulation
from .pod import rank0_endpoint
from .pod_program.description import Budget, JobDescription
from .spec import BertJobSpec, context_key, flag_values
from .stop_budget import termination_grace_period_s
from .telemetry import METRICS_PORT
from .waits import Wait
from .worker import PhaseRun, job_description

__all__ = [
    "SERVICE_ACCOUNT",
    "FabricHeal",
    "RenderedJob",
    "fabric_check",
    "launch_spec",
    "phase_plan",
    "render_job",
]


def script_args(spec: BertJobSpec, plan: TrainingPlan) -> list[str]:
    """The ``training.trainer.pretrain`` arguments: the spec's extra flags plus the ones the job sets."""
    return script_args_from_dict(
        {
            **spec.extra_args,
            **flag_values(spec, plan),
            "metrics_port": METRICS_PORT,
        }
    )


def launch_spec(
    spec: BertJobSpec, plan: TrainingPlan, *, rdzv_endpoint: str, rdzv_id: str = "bert-pretrain"
) -> LaunchSpec:
    """What torchrun runs on each node of the job."""
    return LaunchSpec(
        nnodes=plan.nodes,
        nproc_per_node=plan.nproc_per_node,
        rdzv_endpoint=rdzv_endpoint,
        rdzv_backend=spec.rdzv_backend,
        rdzv_id=rdzv_id,
        max_restarts=spec.max_restarts,
        script_args=tuple(script_args(spec, plan)),
    )


def fabric_check(
    spec: BertJobSpec, plan: TrainingPlan, facts: InstanceFacts, heal: FabricHeal | None = None
) -> FabricCheck | None:
    """The fabric check of a multi-node job on EFA (None when off or nothing crosses a fabric);
    ``heal``: what it does to a node it names (None: nothing, the job aborts)."""
    if not spec.fabric_check or plan.nodes < 2 or not facts.multi_node:
        return None
    heal = heal or FabricHeal()
    return FabricCheck(min_busbw_gbps=spec.fabric_check_min_busbw_gbps, heal=heal.mode, recheck=heal.recheck)


@dataclass(frozen=True)
class FabricHeal:
    """What a failed fabric check does to the nodes it names (with the deep node health check on).

    Attributes:
        mode: ``off`` (the default: the job aborts), ``taint`` or ``replace``
            (:data:`trainium_job.node_health.HEAL_MODES`).
        recheck: a node of a 2-node job goes back to the deep check (True, the default: a managed
            nodegroup, whose nodes the check's DaemonSet selects again once unlabelled), or is
            marked failed like a named node (False: with Karpenter the check runs only on a node
            Karpenter has not initialized yet, so it would never come back).
    """

    mode: str = "off"
    recheck: bool = True


def check_rendezvous(spec: BertJobSpec, *, etcd_available: bool) -> None:
    """An etcd rendezvous needs an etcd server; ConfigError naming ``training_rdzv_backend``."""
    if spec.rdzv_backend != "c10d" and not etcd_available:
        raise ConfigError(
            context_key("rdzv_backend"),
            spec.rdzv_backend,
            "etcd rendezvous needs the etcd add-on: set etcd_enabled=true, or use c10d",
        )


def phase_plan(plan: TrainingPlan, phase: BertJobSpec) -> TrainingPlan:
    """``plan``'s nodes and workers with ``phase``'s batch: a later phase's own accumulation
    (phase 2: 32,768 / (2 x 64 workers) = 256 on 2 x trn1.32xlarge)."""
    later = TrainingPlan(plan.nodes, plan.nproc_per_node, phase.batch_size, phase.global_batch)
    check_accumulation(phase, later)
    return later


def phase_runs(
    phases: TrainingPhases,
    plans: Sequence[TrainingPlan],
    *,
    rdzv_endpoint: str,
    job_name: str,
    waits: Sequence[tuple[Wait, ...] | None] | None = None,
) -> list[PhaseRun]:
    """Each phase's torchrun spec with its plan (``plans``, one per phase), paths, vocabulary and
    waits (``waits``, one entry per phase; None: :func:`trainium_job.worker.dataset_wait`)."""
    # A later phase's rendezvous has an id of its own: an etcd rendezvous keeps its state
    # under the id after a run ends (as the precompile's own "-precompile" id avoids).
    per_phase = list(waits) if waits is not None else [None] * len(phases.phases)
    if len(per_phase) != len(phases.phases):
        raise ValueError(f"waits: {len(per_phase)} entries for {len(phases.phases)} phases")
    return [
        PhaseRun(
            launch_spec(
                phase,
                phase_plan_,
                rdzv_endpoint=rdzv_endpoint,
                rdzv_id=job_name if number == 1 else f"{job_name}-phase{number}",
            ),
            phase.paths,
            phase.vocab,
            phase_waits,
        )
        for number, (phase, phase_plan_, phase_waits) in enumerate(
            zip(phases.phases, plans, per_phase, strict=True), start=1
        )
    ]


def render_job(
    spec: BertJobSpec | TrainingPhases,
    *,
    plan: TrainingPlan,
    gang: Gang,
    etcd_endpoint: str | None = None,
    fabric_heal: FabricHeal | None = None,
    waits: Sequence[tuple[Wait, ...] | None] | None = None,
    budget: Budget | None = None,
    upload_models: bool = False,
) -> RenderedJob:
    """The Volcano Job of ``spec`` on ``gang`` (where its pods run and what they are given:
    :class:`~trainium_job.gang.Gang`, whose nodes and restarts are the plan's and the spec's),
    named ``<gang.name_prefix>-<8 hex of its content>``: a changed spec gets a new name, the same
    spec the same name, whatever tokens the images are at synth.

    ``fabric_heal``: what the fabric check does to a node it names (:class:`FabricHeal`).
    ``waits``: per phase, what its pods wait for before it trains, each bounded (None: the phase's
    dataset marker, ``trainium_job.worker.dataset_wait``). ``budget``: the spend ceiling the pods
    hold the job to (None: none). ``upload_models``: each phase's exported model is copied to the
    model bucket (:func:`trainium_job.worker.model_upload`).

    ``spec`` may be :class:`~trainium_job.phases.TrainingPhases`: the pods run each phase in turn
    (:mod:`trainium_job.pod_program`); ``plan`` is the first phase's, and each later phase gets
    its own accumulation (:func:`phase_plan`).
    """
    phases = as_phases(spec)
    spec = phases.first
    check_rendezvous(spec, etcd_available=bool(etcd_endpoint))
    plans = [plan, *(phase_plan(plan, later) for later in phases.phases[1:])]

    def endpoint(job_name: str) -> str:
        return rank0_endpoint(job_name) if spec.rdzv_backend == "c10d" else str(etcd_endpoint)

    def launch(job_name: str) -> LaunchSpec:
        return launch_spec(spec, plan, rdzv_endpoint=endpoint(job_name), rdzv_id=job_name)

    def describe(job_name: str) -> JobDescription:
        return job_description(
            job_name=job_name,
            phases=phase_runs(
                phases, plans, rdzv_endpoint=endpoint(job_name), job_name=job_name, waits=waits
            ),
            fabric_check=fabric_check(spec, plan, gang.facts, fabric_heal),
            budget=budget,
            grace_s=termination_grace_period_s(),
            hardware=f"{plan.nodes} x {gang.facts.name}",
            upload_models=upload_models,
        )

    gang = dataclasses.replace(gang, nodes=plan.nodes, max_retry=spec.max_retry)
    return render_gang(gang, launch=launch, describe=describe)
