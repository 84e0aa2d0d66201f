"""The short review ``cdk synth`` prints: what the configuration will cost and deliver."""

from __future__ import annotations

from dataclasses import dataclass

from trainium_job.estimates import (
    BUDGET_MARGIN,
    CHECKS_MINUTES,
    MLPERF_MLM_ACCURACY,
    PRECOMPILE_MINUTES,
    rates,
)
from trainium_job.naming import platform_stack_name
from trainium_job.paths import model_commands, model_key_prefix
from trainium_job.spec import BertJobSpec
from trainium_job.stop_budget import stop_problem
from trainium_job.worker import CHECKS_S, PRECOMPILE_DEADLINE_S

from ..addons.etcd import DEFAULT_VOLUME_GIB as ETCD_VOLUME_GIB
from ..cluster.eks_cluster import SYSTEM_ROOT_VOLUME_GIB
from ..compatibility import label as component_label
from ..compatibility import not_compatible
from ..config import PlatformConfig, unverified_addons
from ..config.platform_checks import offering_warnings
from ..images.image_build import BUILD_MINUTES_ESTIMATE, pull_minutes
from ..images.image_build import review_lines as image_review_lines
from ..images.training_image import build_context, context_bytes
from ..jobs.dataset_preparation import pods_per_node, preparation_nodes_taken
from ..jobs.dataset_staging import PUBLIC_BERT_SHAPES
from ..jobs.heldout_staging import PG19_TEST_PARQUET, eval_samples
from ..jobs.node_fit import node_fit
from ..monitoring.rules import BUDGET_ALERT_SHARE
from ..monitoring.stack_values import retention_size_gib
from ..nodes.gang_wait import (
    MIN_GANG_WAIT_MINUTES,
    NODE_LAUNCH_MINUTES,
    gang_wait_floor,
    health_check_minutes,
)
from ..nodes.node_pool import karpenter_warnings
from ..storage.fsx import (
    EXPORT_COMMAND_OUTPUT,
    EXPORT_EVENTS,
    OUTPUT_PATH,
    PERSISTENT_2_THROUGHPUT_TIERS,
    normalized_s3_uri,
    resolved_throughput,
)
from ..storage.model_bucket import BUCKET_NAME_OUTPUT, NONCURRENT_VERSION_DAYS
from ..versions import PREPARATION_NODES, SYSTEM_NODE_INSTANCE_TYPE, neuron_ami_release
from . import prices
from .job_estimate import (
    SCRATCH_2_MB_S_PER_TIB,
    first_data_deadline,
    job_ceiling,
    numbered_phases,
    phase2_data_deadline,
    phase_shape,
    staging_estimates,
)


def platform_review(config: PlatformConfig) -> str:
    """Lines describing the Trainium capacity of ``config``, from the facts table."""
    facts = config.facts
    nodes = config.desired_nodes
    endpoint = (
        ("public from " + ", ".join(config.endpoint_public_cidrs) + " + private")
        if config.endpoint_public_cidrs
        else "private only"
    )
    return "\n".join(
        [
            f"Trainium platform '{config.name_prefix}' in {config.region} ({config.trainium_az_id})",
            nodes_line(config),
            *([gang_wait_line(config)] if config.trainium_capacity == "karpenter" else []),
            f"  NeuronCores:  {nodes * facts.neuron_cores} ({facts.neuron_cores} per node, "
            f"{nodes * facts.neuron_devices} Trainium devices)",
            f"  EFA:          {facts.efa_interfaces} interfaces per node, "
            f"{nodes * facts.network_gbps:,.0f} Gbps in all",
            f"  cost:         {cost_review(config)}",
            *idle_review(config),
            f"  Kubernetes:   {config.kubernetes_version}, API endpoint {endpoint}; Trainium AMI release "
            f"{config.ami_release_version}",
            f"  FSx:          {config.fsx_deployment_type} {config.fsx_storage_gib:,} GiB at /data, "
            f"etcd {'on' if config.etcd_enabled else 'off'}",
            *fsx_link_lines(config),
            monitoring_review(config),
            *node_fit(config).review_lines(training=config.training_enabled),
            *training_review(config),
            *(f"warning: {line}" for line in training_warnings(config)),
            *(f"warning: {line}" for line in compatibility_warnings(config)),
            *(f"warning: {line}" for line in ami_warnings(config)),
            *(f"warning: {line}" for line in offering_warnings(config)),
            *(f"warning: {line}" for line in _karpenter_warnings(config)),
            *(
                f"warning: {addon} is not verified for Kubernetes {config.kubernetes_version}; EKS refuses "
                "versions it does not offer (check `aws eks describe-addon-versions`)"
                for addon in unverified_addons(config.kubernetes_version)
            ),
        ]
    )


def cost_review(c: PlatformConfig) -> str:
    """The ``cost:`` line's text: the Trainium nodes' on-demand price, and with Karpenter, that it
    is paid only while a job runs (plus the empty nodes' wait after the last one)."""
    price = c.facts.on_demand_usd_per_hour
    if price is None:
        return "unknown (no list price in the facts table)"
    nodes = c.desired_nodes
    cost = f"${price * nodes:,.2f}/h on demand (${price:,.2f}/h per node, us-east-1 list price)"
    if c.trainium_capacity != "karpenter":
        return cost
    tail = price * nodes * c.trainium_idle_minutes / 60
    cost += (
        f" only while a job runs: Karpenter launches them per job and removes them "
        f"{c.trainium_idle_minutes} min after the last job ends (~${tail:,.2f} of empty nodes each time)"
    )
    if c.capacity_reservation_id is not None:
        # EC2 bills a capacity reservation whether instances run in it or not; a Capacity Block
        # is paid in full when it is bought.
        paid = (
            "a Capacity Block is paid up front"
            if c.capacity_type == "capacity-block"
            else "a reservation bills"
        )
        cost += f"; {paid} for its whole term, nodes or not"
    return cost


@dataclass(frozen=True)
class CostPart:
    """One part of the idle cost: what, USD per hour (None: no list price) and the pricing pages
    of its figures."""

    label: str
    usd_per_hour: float | None
    pages: tuple[str, ...]


def idle_parts(c: PlatformConfig, *, trainium_always_on: bool | None = None) -> list[CostPart]:
    """What the platform costs per hour while no training runs, part by part, from
    :mod:`trainium_eks.report.prices`. ``trainium_always_on`` counts the Trainium nodes (and their root
    volumes); by default it does with ``trainium_capacity=nodegroup``, whose nodes never stop."""
    if trainium_always_on is None:
        trainium_always_on = c.trainium_capacity == "nodegroup"
    facts, nodes = c.facts, c.desired_nodes
    parts = []
    if trainium_always_on:
        price = facts.on_demand_usd_per_hour
        parts.append(
            CostPart(
                f"{nodes} x {facts.name}",
                None if price is None else price * nodes,
                ("Amazon EC2 On-Demand pricing",),
            )
        )
    eks = prices.EKS_CONTROL_PLANE
    parts.append(CostPart("EKS control plane", eks.hourly(), (eks.page,)))
    system = prices.EC2_ON_DEMAND[SYSTEM_NODE_INSTANCE_TYPE]
    parts.append(
        CostPart(
            f"{c.system_nodes} x {SYSTEM_NODE_INSTANCE_TYPE} system nodes",
            system.hourly(c.system_nodes),
            (system.page,),
        )
    )
    if c.existing_vpc_id is None:
        nat, ipv4 = prices.NAT_GATEWAY, prices.PUBLIC_IPV4
        label = (
            "1 NAT gateway + its IPv4"
            if c.nat_gateways == 1
            else f"{c.nat_gateways} NAT gateways + their IPv4"
        )
        parts.append(CostPart(label, (nat.hourly() + ipv4.hourly()) * c.nat_gateways, (nat.page,)))
    throughput = resolved_throughput(c.fsx_deployment_type, c.fsx_throughput_per_tib)
    fsx = prices.fsx_storage(c.fsx_deployment_type, throughput)
    tier = f" at {throughput} MB/s/TiB" if throughput is not None else ""
    parts.append(
        CostPart(
            f"FSx {c.fsx_deployment_type} {c.fsx_storage_gib:,} GiB{tier}",
            fsx.hourly(c.fsx_storage_gib),
            (fsx.page,),
        )
    )
    volumes = [  # (what, how many, GiB each)
        *([("Prometheus", 1, c.monitoring_volume_gib)] if c.monitoring_enabled else []),
        *([("etcd", 1, ETCD_VOLUME_GIB)] if c.etcd_enabled else []),
        ("system roots", c.system_nodes, SYSTEM_ROOT_VOLUME_GIB),
        *([("Trainium roots", nodes, c.root_volume_gib)] if trainium_always_on else []),
    ]
    gib = sum(count * size for _, count, size in volumes)
    listed = ", ".join(
        f"{what} {count} x {size:,}" if count > 1 else f"{what} {size:,}" for what, count, size in volumes
    )
    ebs = prices.EBS_GP3
    parts.append(CostPart(f"EBS gp3 {gib:,} GiB ({listed})", ebs.hourly(gib), (ebs.page,)))
    return parts


def idle_total(parts: list[CostPart]) -> float:
    """USD per hour of the parts that have a price."""
    return sum(p.usd_per_hour for p in parts if p.usd_per_hour is not None)


def idle_review(c: PlatformConfig) -> list[str]:
    """The ``idle:`` lines: USD per hour with no job running, its parts, their sources and what is
    left out."""
    parts = idle_parts(c)
    total = idle_total(parts)
    head = f"  idle:         ${total:,.2f}/h with no job running (~${total * prices.HOURS_PER_MONTH:,.0f} a month)"
    if c.trainium_capacity == "nodegroup":
        per_job = idle_total(idle_parts(c, trainium_always_on=False))
        head += f", the Trainium nodes always on (trainium_capacity=karpenter: ${per_job:,.2f}/h)"
    else:
        # The fixed nodegroup stays one key away: say what it would add while no job runs.
        always_on = idle_parts(c, trainium_always_on=True)
        fixed = (
            f"${idle_total(always_on):,.2f}/h"
            if all(p.usd_per_hour is not None for p in always_on)
            else "more (no list price for its nodes)"
        )
        head += f", no Trainium node (trainium_capacity=nodegroup keeps {c.desired_nodes} x {c.facts.name} on: {fixed})"
    priced = " + ".join(
        f"{p.label} " + (f"${p.usd_per_hour:,.2f}" if p.usd_per_hour is not None else "(no list price)")
        for p in parts
    )
    pages = list(dict.fromkeys(page for p in parts for page in p.pages))
    tables = "trainium_eks/report/prices.py" + (
        ", trainium_job/instances.py" if c.trainium_capacity == "nodegroup" else ""
    )
    left_out = [nat_data_review(c), *prices.NOT_COUNTED]
    if c.existing_vpc_id:
        left_out.append(
            "the existing VPC's NAT (the platform adds no S3 gateway endpoint to that VPC: without one "
            "of its own, S3 traffic and ECR image layers cross its NAT)"
        )
    return [
        head,
        f"                {priced}",
        f"                {prices.PRICE_BASIS}, {prices.HOURS_PER_MONTH} h a month: {'; '.join(pages)} "
        f"({tables})",
        f"                not counted: {', '.join(left_out)}",
    ]


def nat_data_review(c: PlatformConfig) -> str:
    """The NAT gateway's data charge, and what the created VPC's S3 gateway endpoint keeps off it
    (:class:`~trainium_eks.network.vpc.TrainiumNetwork`): S3 in the platform's region, which
    serves ECR's image layers too; S3 elsewhere and every other destination still cross the NAT."""
    data = f"NAT data ${prices.NAT_DATA_PROCESSED.usd:.3f}/GB"
    if c.existing_vpc_id:
        return data
    return f"{data} (S3 in {c.region}, ECR image layers included, takes the free S3 gateway endpoint instead)"


#: How the review says each ``AutoExportPolicy`` event (:data:`~trainium_eks.storage.fsx.EXPORT_EVENTS`).
_EXPORT_EVENT_WORDS = {"NEW": "created", "CHANGED": "changed", "DELETED": "deleted"}


def fsx_link_lines(c: PlatformConfig) -> list[str]:
    """The file system's S3 links: what /runs exports (and the command for the files already
    there), and that FSx backs up no file system linked to S3 (:mod:`trainium_eks.storage.fsx`)."""
    lines = []
    if c.fsx_s3_export_uri:
        words = [_EXPORT_EVENT_WORDS[e] for e in EXPORT_EVENTS]
        events = ", ".join(words[:-1]) + f" or {words[-1]}" if len(words) > 1 else words[0]
        lines.append(
            f"                {OUTPUT_PATH} exported to {normalized_s3_uri(c.fsx_s3_export_uri)} as files are "
            f"{events}; files already there: the {EXPORT_COMMAND_OUTPUT} output of "
            f"{platform_stack_name(c.name_prefix)} (one EXPORT_TO_REPOSITORY task)"
        )
    if c.fsx_s3_import_uri or c.fsx_s3_export_uri:
        lines.append(
            "                linked to S3: FSx backs up no file system linked to an S3 data repository "
            '(FSx for Lustre User Guide, "Working with backups")'
        )
    return lines


def nodes_line(c: PlatformConfig) -> str:
    """The review line of the Trainium nodes: the nodegroup's sizes, or Karpenter's per job."""
    name = c.facts.name
    if c.trainium_capacity == "karpenter":
        return (
            f"  nodes:        {c.desired_nodes} x {name} per job, launched by Karpenter (at most {c.max_nodes} at "
            f"once; a gang not complete after {c.trainium_gang_wait_minutes} min is aborted and its nodes released)"
        )
    return f"  nodes:        {c.desired_nodes} x {name} (min {c.min_nodes}, max {c.max_nodes})"


def gang_wait_line(c: PlatformConfig) -> str:
    """The review line of the gang wait: the configured minutes against what a new node needs
    before its pod runs (:func:`trainium_eks.nodes.gang_wait.gang_wait_floor`; a value under it is refused)."""
    floor = gang_wait_floor(c.facts, health_check=c.trainium_health_check)
    return (
        f"                gang wait {c.trainium_gang_wait_minutes} min, at least {floor.minutes}: a pod waits for its "
        f"new node through {floor.explain()}; the fabric check runs after it starts (trainium_eks/nodes/gang_wait.py)"
    )


def monitoring_review(c: PlatformConfig) -> str:
    """The review line of the monitoring add-on: what runs and how long Prometheus keeps data."""
    if not c.monitoring_enabled:
        return "  monitoring:   off (monitoring_enabled=false)"
    m = c.monitoring
    parts = [
        f"Prometheus ({m.retention_days} d or {retention_size_gib(m.volume_gib)} GiB on a {m.volume_gib} GiB "
        "gp3 volume)",
        *(["Grafana"] if m.grafana else []),
        *(["Alertmanager"] if m.alertmanager else []),
        *(["neuron-monitor"] if m.neuron_monitor else []),
        *(["EFA and FSx exporters"] if c.training_enabled and c.monitoring_exporters else []),
        *(["remote write to Amazon Managed Service for Prometheus"] if m.amp_remote_write else []),
    ]
    return f"  monitoring:   {', '.join(parts)}"


#: Components every platform deploys (the EFA chart only where the instance type has EFA, the
#: monitoring chart only with ``monitoring_enabled``); the
#: managed add-ons are checked by :func:`trainium_eks.config.unverified_addons` and the config checks.
PLATFORM_COMPONENTS = ("kubectl-layer", "neuron-ami", "neuron", "volcano", "fsx-csi-driver")


def compatibility_warnings(c: PlatformConfig) -> list[str]:
    """One line per deployed component not declared compatible with the Kubernetes version."""
    deployed = [
        *PLATFORM_COMPONENTS,
        *(["efa"] if c.facts.multi_node else []),
        *(["kube-prometheus-stack"] if c.monitoring_enabled else []),
        *(["karpenter", "karpenter-crd"] if c.trainium_capacity == "karpenter" else []),
    ]
    return [
        f"{component_label(component)} is not declared compatible with Kubernetes {c.kubernetes_version}: {d.source}"
        for component, d in not_compatible(c.kubernetes_version, deployed)
    ]


def _karpenter_warnings(c: PlatformConfig) -> list[str]:
    if c.trainium_capacity != "karpenter":
        return []
    return karpenter_warnings(
        max_nodes=c.max_nodes,
        desired_nodes=c.desired_nodes,
        idle_minutes=c.trainium_idle_minutes,
        facts=c.facts,
        health_check=c.trainium_health_check,
    )


def ami_warnings(c: PlatformConfig) -> list[str]:
    """A warning for a Trainium AMI release whose Neuron driver is not in the table."""
    release = c.ami_release_version
    if neuron_ami_release(release) is not None:
        return []
    return [
        f"trainium_ami_release_version {release} is not in NEURON_AMI_RELEASES "
        "(trainium_eks/versions.py): its Neuron driver is unknown; the training pods check it when they start"
    ]


def training_warnings(c: PlatformConfig) -> list[str]:
    """Values that are legal but most likely not what the user meant (printed, not refused)."""
    if not c.training_enabled:
        return []
    warnings = []
    spec = c.training
    if spec.checkpoint_every >= spec.max_steps:
        warnings.append(
            f"training_checkpoint_every={spec.checkpoint_every} >= training_max_steps="
            f"{spec.max_steps}: no checkpoint before the end, a failure restarts from step 0"
        )
    steps_this_run = spec.extra_args.get("steps_this_run")
    if steps_this_run is not None and int(steps_this_run) < spec.checkpoint_every:
        warnings.append(
            f"training_script_args steps_this_run={steps_this_run} < training_checkpoint_every="
            f"{spec.checkpoint_every}: the run ends before its first checkpoint"
        )
    stop = stop_warning(c)
    if stop is not None:
        warnings.append(stop)
    if c.max_nodes > 2 * c.desired_nodes:
        warnings.append(
            f"max_nodes={c.max_nodes} is more than twice the job's {c.desired_nodes} nodes: "
            "the Volcano queue and nodegroup allow nodes the job never uses"
        )
    return warnings


def stop_warning(c: PlatformConfig) -> str | None:
    """When a BERT-large job's stop checkpoint does not fit torchrun's 30 s window: what happens
    and the throughput tier that fits (see :mod:`trainium_job.stop_budget`)."""
    spec = c.training
    if spec.model != "large":
        return None
    fp32_state = (
        bool(spec.extra_args.get("fp32_master_weights")) or spec.extra_args.get("precision") == "fp32"
    )
    per_tib = resolved_throughput(c.fsx_deployment_type, c.fsx_throughput_per_tib) or SCRATCH_2_MB_S_PER_TIB
    problem = stop_problem(fp32_state=fp32_state, storage_gib=c.fsx_storage_gib, mb_s_per_tib=per_tib)
    if problem is None:
        return None
    fits = [
        tier
        for tier in PERSISTENT_2_THROUGHPUT_TIERS
        if stop_problem(fp32_state=fp32_state, storage_gib=c.fsx_storage_gib, mb_s_per_tib=tier) is None
    ]
    fix = (
        f"fsx_throughput_per_tib={fits[0]} (PERSISTENT_2) fits it"
        if fits
        else "a larger fsx_storage_gib with a higher fsx_throughput_per_tib fits it"
    )
    return f"{problem}; {fix}"


def training_review(c: PlatformConfig) -> list[str]:
    """Review lines for ``cdk synth``: workers, each phase's batch, steps, time and cost, and
    where the model lands."""
    if not c.training_enabled:
        return ["  training:     off (training_enabled=false)"]
    spec = c.training
    plan = c.training_plan
    phases = {
        "both": "phase 1, then phase 2 from its final checkpoint",
        "1": "phase 1 only",
        "2": "phase 2 only",
    }
    lines = [
        f"  training:     BERT-{spec.model}, {plan.workers} workers ({c.desired_nodes} x {plan.nproc_per_node}), "
        f"{phases[c.training_phases]} (training_phases={c.training_phases}), rendezvous {spec.rdzv_backend}",
    ]
    for number, job in numbered_phases(c):
        lines += phase_review(c, number, job)
    lines += image_review_lines(context_bytes=context_bytes(build_context()))
    lines += staging_review(c)
    lines += heldout_review(c)
    lines += start_review(c)
    lines += budget_review(c)
    if c.preparation_enabled:
        lines += preparation_review(c, spec.dataset_name)
    lines += model_review(c)
    return lines


def preparation_review(c: PlatformConfig, dataset_name: str) -> list[str]:
    """The ``dataset:`` lines of a preparation: its pods, and the nodes they run on: with Karpenter
    the CPU nodes it launches for them and what those cost at most (a node with fewer pods may be
    a smaller type)."""
    head = (
        f"  dataset:      prepared from {c.preparation_corpus} by {c.preparation_pods} pods x "
        f"{c.preparation_cpus_per_pod} CPUs into /data/datasets/{dataset_name}"
    )
    if c.trainium_capacity != "karpenter":
        per_node = pods_per_node(c.preparation_pods, c.desired_nodes)
        return [
            head,
            f"                on the Trainium nodes ({per_node} pods per node), before the training job is submitted",
        ]
    nodes = PREPARATION_NODES
    per_node, launched = preparation_nodes_taken(
        c.preparation_pods, c.preparation_cpus_per_pod, daemons=node_fit(c).daemon_requests
    )
    price = prices.EC2_ON_DEMAND[nodes.largest].usd
    return [
        head,
        f"                on CPU nodes Karpenter launches for them, not on Trainium: at most {launched} x "
        f"{nodes.largest} (up to {per_node} pods each), ${launched * price:,.2f}/h while they run; the pool's limit "
        f"{nodes.limit_vcpus} vCPUs of {nodes.family} (${nodes.limit_vcpus // nodes.largest_vcpus * price:,.2f}/h)",
    ]


def phase_review(c: PlatformConfig, number: int, job: BertJobSpec) -> list[str]:
    """One phase: its shape, batch and schedule, and its time and cost at the published rates."""
    plan = c.phase_plan(job)
    seq_len, _ = phase_shape(job)
    start = ""
    if number == 2:
        start = (
            " from phase 1's final checkpoint"
            if c.training_phases == "both"
            else f" from {c.phase2_init_from}"
        )
    sequences = job.max_steps * job.global_batch
    lines = [
        f"  phase {number}:      seq {seq_len}{start}, micro-batch {plan.batch_size} x accumulation "
        f"{plan.grad_accum_usteps} = global batch {plan.global_batch:,}",
        f"  schedule:     {job.max_steps:,} steps = {sequences:,} sequences, checkpoint every "
        f"{job.checkpoint_every} steps, run /data/runs/{job.run_name}",
        f"                its own precompile (~{PRECOMPILE_MINUTES} min) into cache set {job.cache_set}, "
        f"shards /data/datasets/{job.dataset_name}",
    ]
    return lines + estimate_lines(c, sequences, seq_len)


def estimate_lines(c: PlatformConfig, sequences: int, seq_len: int) -> list[str]:
    """Hours and on-demand cost of ``sequences`` at the published rates
    (:func:`trainium_job.estimates.rates`)."""
    facts = c.facts
    price = facts.on_demand_usd_per_hour
    found = rates(facts.name, c.desired_nodes, seq_len)
    if not found:
        return [f"  estimate:     no published throughput for {facts.name}"]
    lines = []
    for rate in found:
        hours = sequences / rate.seq_per_s / 3600
        cost = f", ${hours * price * c.desired_nodes:,.0f} on demand" if price is not None else ""
        lines.append(f"  estimate:     {rate.seq_per_s:,.0f} seq/s ({rate.label}): {hours:,.1f} h{cost}")
    return lines


def model_review(c: PlatformConfig) -> list[str]:
    """Where each phase's Hugging Face model lands: on FSx, in the model bucket (pod 0 uploads it
    after its export), and where FSx exports ``/runs`` with ``fsx_s3_export_uri``; how to fetch
    and load the last one."""
    if not c.vocab_source and not c.preparation_enabled:
        return ["  model:        not exported (vocab_source is empty): checkpoints only, in /data/runs/<run>"]
    runs = [job.run_name for _, job in numbered_phases(c)]
    where = ", ".join(f"/data/runs/{run}/model" for run in runs)
    uris = [f"s3://<bucket>/{model_key_prefix(run)}/" for run in runs]
    fetch, load = model_commands(uris[-1], f"{runs[-1]}-model")
    lines = [
        f"  model:        Hugging Face folder after each phase: {where}",
        f"                uploaded by pod 0 after each export, SHA-256 checked: {', '.join(uris)}",
        f"                fetch: {fetch} ; load: {load}",
    ]
    if c.fsx_s3_export_uri:
        uri = c.fsx_s3_export_uri.rstrip("/")
        lines.append(
            f"                also exported by FSx to {', '.join(f'{uri}/{run}/model/' for run in runs)}"
        )
    return lines + model_bucket_lines(c)


def model_bucket_lines(c: PlatformConfig) -> list[str]:
    """The model bucket (:class:`~trainium_eks.storage.model_bucket.ModelBucket`): where a run's
    model goes in it, and where its name is read (CloudFormation names it at deploy)."""
    stack = platform_stack_name(c.name_prefix)
    return [
        f"  model bucket: s3://<bucket>/{model_key_prefix('<run>')}/ (<bucket>: the {BUCKET_NAME_OUTPUT} output of "
        f"{stack}), SSE-S3, versioned (older versions kept {NONCURRENT_VERSION_DAYS} d), TLS only, no public "
        "access, kept when the stack is deleted"
    ]


#: Minutes EKS takes to create a cluster's control plane: the EKS team's average
#: (aws/containers-roadmap issue #1227, "Reduction in EKS cluster creation time").
EKS_CLUSTER_CREATE_MINUTES = 15


def start_review(c: PlatformConfig) -> list[str]:
    """The ``start:`` lines: expected minutes to the first training step, phase by phase, with the
    source of each figure. From the deploy with a nodegroup; from the job's submission with
    Karpenter (which launches the nodes then)."""
    pull = pull_minutes()
    health = health_check_minutes(c.facts) if c.trainium_health_check else 0
    after_join = (
        f"~{pull:.0f} min image pull{' (parallel pull on: less)' if c.fast_image_pull else ''} + "
        + (f"~{health} min node health check + " if health else "")
        + f"~{CHECKS_MINUTES} min checks + ~{PRECOMPILE_MINUTES} min precompile into an empty cache set"
    )
    job = NODE_LAUNCH_MINUTES + pull + health + CHECKS_MINUTES + PRECOMPILE_MINUTES
    deploy = EKS_CLUSTER_CREATE_MINUTES + BUILD_MINUTES_ESTIMATE
    if c.trainium_capacity == "karpenter":
        lines = [
            f"  start:        job submitted -> first step ~{job:.0f} min: ~{NODE_LAUNCH_MINUTES} min node launch "
            f"and join + {after_join}; ~{job - PRECOMPILE_MINUTES:.0f} min once the cache on FSx holds the graphs",
            f"                the first job also waits for the deploy (~{EKS_CLUSTER_CREATE_MINUTES} min EKS cluster "
            f"+ ~{BUILD_MINUTES_ESTIMATE:.0f} min image build); one within {c.trainium_idle_minutes} min of the "
            "last reuses its nodes (no launch, image on the node)",
        ]
    else:
        lines = [
            f"  start:        deploy -> first step ~{deploy + job:.0f} min: ~{EKS_CLUSTER_CREATE_MINUTES} min EKS "
            f"cluster + ~{NODE_LAUNCH_MINUTES} min node launch and join, then ~{BUILD_MINUTES_ESTIMATE:.0f} min "
            f"image build + {after_join}",
            f"                a relaunch on the running nodes: ~{CHECKS_MINUTES} min checks, no pull of the same "
            "image, no precompile once the cache on FSx holds the graphs",
        ]
    return [
        *lines,
        "                sources: EKS cluster aws/containers-roadmap#1227 (EKS team's average); node launch: "
        f"estimate, no published trn1 figure (Karpenter gives up on a node after {MIN_GANG_WAIT_MINUTES} min); "
        "build and pull: the image lines; "
        + ("node health check: estimate, not measured on hardware; " if c.trainium_health_check else "")
        + "precompile: Neuron BERT pretraining tutorial; dataset staging: the staging lines",
    ]


def staging_review(c: PlatformConfig) -> list[str]:
    """The ``staging:`` lines: each staging Job's size and time, the waits bounded by them, and
    the Trainium node-minutes spent waiting for data before the first step (none: the job is
    submitted once its first shards are staged)."""
    first = first_data_deadline(c)
    lines: list[str] = []
    for number, estimate in sorted(staging_estimates(c).items()):
        if number == 2 and c.training_phases == "both":
            later = phase2_data_deadline(c)
            when = (
                f"during phase 1's training, after phase 1's shards; after phase 1 the pods wait at most "
                f"{later.seconds // 60} min for them"
            )
        else:
            when = f"before the job is submitted: its submitter waits at most {first.seconds // 60} min (twice that)"
        head = "  staging:      " if not lines else "                "
        lines.append(f"{head}phase {number}: {estimate.explain()}, {when}")
    if c.preparation_enabled:
        lines.insert(
            0,
            f"  staging:      phase 1: prepared on the cluster (the dataset line); its submitter waits at most "
            f"{first.seconds // 60} min ({first.why})",
        )
    return [
        *lines,
        "                0 Trainium node-minutes wait for data: the gang is submitted once its first shards are "
        "there; a staging that gave up ends the job at once (the finished phases' models exported)",
        f"                other bounds: precompile {PRECOMPILE_DEADLINE_S // 60} min, checks {CHECKS_S // 60} min, "
        "each wait above; a pod past one ends the job (AbortJob) and its nodes are released",
    ]


def heldout_review(c: PlatformConfig) -> list[str]:
    """The ``held-out:`` lines: each phase's held-out set, how much of it each evaluation reads and
    when, MLPerf's target beside phase 2's end, and where the set comes from."""
    if not c.heldout_enabled:
        return ["  held-out:     off (heldout_enabled=false): no evaluation, the runs report no quality"]
    lines: list[str] = []
    for number, job in numbered_phases(c):
        if job.eval_dir is None or job.evaluation_interval is None:
            continue
        head = "  held-out:     " if not lines else "                "
        lines.append(
            f"{head}phase {number}: {job.eval_dir}, {eval_samples(job):,} samples of seq {phase_shape(job)[0]} "
            f"per evaluation, every {job.evaluation_interval:,} steps and after step {job.max_steps:,}"
        )
        if number == 2:
            lines.append(
                f"                reference for phase 2's end: {MLPERF_MLM_ACCURACY:.3f} masked-LM accuracy, MLPerf "
                "Training's BERT-large target, measured on MLPerf's own 10,000-sample set (not this one)"
            )
    if not lines:
        return [
            "  held-out:     none: no vocabulary to make it with (vocab_source is empty); set vocab_source"
        ]
    staged = [c.phase2_dataset_source] if c.training_phases == "2" else [c.training_dataset_source]
    if c.training_phases == "both":
        staged.append(c.phase2_dataset_source)
    public = not c.preparation_enabled and all(source in PUBLIC_BERT_SHAPES for source in staged)
    overlap = (
        "not the public shards' Wikipedia"
        if public
        else "your shards must hold none of these books: the overlap is not checked"
    )
    where = "the dataset node" if c.trainium_capacity == "karpenter" else "a Trainium node"
    return [
        *lines,
        f"                made on {where} once the phase's shards are staged, with their vocabulary and casing, "
        f"from PG-19's test books (Project Gutenberg, published before 1919; {overlap}; the Encyclopaedia "
        f"Britannica's volumes left out): {PG19_TEST_PARQUET}",
        "                the pods never wait for it: a phase evaluates from the first evaluation step that finds it",
    ]


def budget_review(c: PlatformConfig) -> list[str]:
    """The ``budget:`` line: the spend ceiling beside the estimate, and its alert."""
    ceiling = job_ceiling(c)
    if ceiling.usd is None:
        return [
            f"  budget:       no spend ceiling: no published rate or list price for {c.facts.name} to derive "
            "one from; set training_budget_usd"
        ]
    estimate = f"${ceiling.estimate_usd:,.0f}" if ceiling.estimate_usd is not None else "unknown"
    how = (
        f"the estimate {estimate} ({ceiling.hours:,.1f} h at the slower rate, precompiles and node start) "
        f"x {BUDGET_MARGIN}, rounded up"
        if ceiling.derived
        else f"training_budget_usd; the estimate: {estimate}"
    )
    return [
        f"  budget:       ${ceiling.usd:,} spend ceiling ({how}): the pods count their node-hours; at it the "
        "job checkpoints, exports the phase in flight and ends (raise it and redeploy to go on); "
        f"alert at {BUDGET_ALERT_SHARE:.0%} (${ceiling.usd * BUDGET_ALERT_SHARE:,.0f})"
    ]
