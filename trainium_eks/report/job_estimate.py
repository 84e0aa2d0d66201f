"""A configured job's expected time and cost, its spend ceiling, and how long its data takes to stage:
the figures the review prints and the workload turns into the pods' deadlines and ceiling."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from trainium_job.estimates import CHECKS_MINUTES, PhaseWork, default_budget_usd, job_hours
from trainium_job.spec import BertJobSpec

from .._training.trainer.cli import build_parser
from ..config import PlatformConfig
from ..images.image_build import pull_minutes
from ..jobs.dataset_staging import PUBLIC_SOURCE_BYTES
from ..jobs.staging_eta import StagingEstimate, fsx_bytes_per_s, staging_estimate
from ..nodes.gang_wait import NODE_LAUNCH_MINUTES, health_check_minutes
from ..storage.fsx import resolved_throughput

#: SCRATCH_2's fixed baseline throughput, MB/s per TiB (FSx for Lustre User Guide, "Deployment
#: options": 200 MB/s/TiB).
SCRATCH_2_MB_S_PER_TIB = 200


def phase_shape(job: BertJobSpec) -> tuple[int, int]:
    """(--seq_len, --max_pred_len) the phase's trainer reads: its flags, else the script's defaults."""
    parser = build_parser()
    extra = job.extra_args
    return (
        int(extra.get("seq_len", parser.get_default("seq_len"))),
        int(extra.get("max_pred_len", parser.get_default("max_pred_len"))),
    )


def numbered_phases(c: PlatformConfig) -> list[tuple[int, BertJobSpec]]:
    """(phase number, job) of each phase the job runs."""
    numbers = {"both": (1, 2), "1": (1,), "2": (2,)}[c.training_phases]
    return list(zip(numbers, c.phase_jobs, strict=True))


def node_start_minutes(c: PlatformConfig) -> float:
    """Minutes a Trainium node bills before its training pod's program starts: its launch and join,
    the image pull and the node health check (with Karpenter; a nodegroup's nodes are up)."""
    health = health_check_minutes(c.facts) if c.trainium_health_check else 0
    return NODE_LAUNCH_MINUTES + pull_minutes() + health


@dataclass(frozen=True)
class Ceiling:
    """The job's spend ceiling: USD (None: none), whether derived, the estimate it comes from."""

    usd: int | None
    derived: bool
    estimate_usd: float | None
    hours: float | None


def job_ceiling(c: PlatformConfig) -> Ceiling:
    """``training_budget_usd``, or the default derived from the estimate (none without a rate or
    a list price)."""
    price = c.facts.on_demand_usd_per_hour
    work = [PhaseWork(job.max_steps * job.global_batch, phase_shape(job)[0]) for _, job in numbered_phases(c)]
    hours = job_hours(
        c.facts.name, c.desired_nodes, work, start_minutes=node_start_minutes(c) + CHECKS_MINUTES
    )
    estimate = hours * c.desired_nodes * price if hours is not None and price is not None else None
    if c.training_budget_usd is not None:
        return Ceiling(c.training_budget_usd, False, estimate, hours)
    if hours is None or price is None:
        return Ceiling(None, True, None, hours)
    return Ceiling(
        default_budget_usd(hours, nodes=c.desired_nodes, usd_per_node_hour=price), True, estimate, hours
    )


def fsx_rate(c: PlatformConfig) -> float:
    """The file system's baseline throughput, bytes per second."""
    per_tib = resolved_throughput(c.fsx_deployment_type, c.fsx_throughput_per_tib) or SCRATCH_2_MB_S_PER_TIB
    return fsx_bytes_per_s(c.fsx_storage_gib, per_tib)


def staging_estimates(
    c: PlatformConfig, sizes: Mapping[str, int] = PUBLIC_SOURCE_BYTES
) -> dict[int, StagingEstimate]:
    """Phase number -> its staging Job's estimate (none for a phase whose shards are prepared),
    from the sources' bytes in ``sizes`` (default: the table the deadlines are derived from)."""
    on_dataset_node = c.trainium_capacity == "karpenter"
    rate = fsx_rate(c)
    found = {}
    if not c.preparation_enabled and c.training_phases != "2":
        found[1] = staging_estimate(
            c.training_dataset_source, bytes_per_s=rate, on_dataset_node=on_dataset_node, sizes=sizes
        )
    if c.training_phases != "1":
        start = c.phase2_init_from if c.training_phases == "2" else ""
        found[2] = staging_estimate(
            c.phase2_dataset_source,
            bytes_per_s=rate,
            start=start,
            on_dataset_node=on_dataset_node,
            sizes=sizes,
        )
    return found


#: The wait for shards the cluster prepares from a corpus (``preparation_enabled``), whose size
#: synth does not know: a day. The reference data tool took 8.7 hours for the whole Wikipedia set
#: on a 72-vCPU machine with 32 processes (NVIDIA's BERT data preparation); the default
#: preparation runs 64 processes.
PREPARATION_DEADLINE_S = 24 * 3600


@dataclass(frozen=True)
class Deadline:
    """A wait's bound, seconds, and how it was derived."""

    seconds: int
    why: str


def first_data_deadline(c: PlatformConfig) -> Deadline:
    """How long the job's submitter waits for its first phase's shards (and an imported start)."""
    if c.training_data_deadline_minutes is not None:
        return Deadline(c.training_data_deadline_minutes * 60, "training_data_deadline_minutes")
    first = numbered_phases(c)[0][0]
    estimate = staging_estimates(c).get(first)
    if estimate is None:
        return Deadline(PREPARATION_DEADLINE_S, "a day for shards prepared from a corpus of unknown size")
    return Deadline(estimate.deadline_s, f"twice the staging estimate: {estimate.explain()}")


def phase2_data_deadline(c: PlatformConfig) -> Deadline:
    """How long the training pods wait for phase 2's shards after phase 1 (``training_phases=both``):
    twice the staging estimate, as if that staging had only begun (it began once phase 1's shards
    were staged, during phase 1's day of training)."""
    estimate = staging_estimates(c)[2]
    return Deadline(estimate.deadline_s, f"twice phase 2's staging estimate: {estimate.explain()}")
