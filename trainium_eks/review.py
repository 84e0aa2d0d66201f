"""The short review ``cdk synth`` prints: what the configuration will cost and deliver."""

from __future__ import annotations

from trainium_job.stop_budget import stop_problem

from .compatibility import label as component_label
from .compatibility import not_compatible
from .config import PlatformConfig, unverified_addons
from .fsx import PERSISTENT_2_THROUGHPUT_TIERS, resolved_throughput
from .image_build import review_lines as image_review_lines
from .monitoring.stack_values import retention_size_gib
from .node_fit import node_fit
from .training_image import build_context, context_bytes
from .versions import neuron_ami_release

#: SCRATCH_2's fixed baseline throughput, MB/s per TiB (FSx for Lustre User Guide, "Deployment
#: options": 200 MB/s/TiB).
SCRATCH_2_MB_S_PER_TIB = 200


def platform_review(config: PlatformConfig) -> str:
    """Lines describing the Trainium capacity of ``config``, from the facts table."""
    facts = config.facts
    nodes = config.desired_nodes
    price = facts.on_demand_usd_per_hour
    cost = (
        f"${price * nodes:,.2f}/h on demand (${price:,.2f}/h per node, us-east-1 list price)"
        if price is not None
        else "unknown (no list price in the facts table)"
    )
    endpoint = (
        ("public from " + ", ".join(config.endpoint_public_cidrs) + " + private")
        if config.endpoint_public_cidrs
        else "private only"
    )
    return "\n".join(
        [
            f"Trainium platform '{config.name_prefix}' in {config.region} ({config.trainium_az_id})",
            f"  nodes:        {nodes} x {facts.name} (min {config.min_nodes}, max {config.max_nodes})",
            f"  NeuronCores:  {nodes * facts.neuron_cores} ({facts.neuron_cores} per node, "
            f"{nodes * facts.neuron_devices} Trainium devices)",
            f"  EFA:          {facts.efa_interfaces} interfaces per node, "
            f"{nodes * facts.network_gbps:,.0f} Gbps in all",
            f"  cost:         {cost}",
            f"  Kubernetes:   {config.kubernetes_version}, API endpoint {endpoint}; Trainium AMI release "
            f"{config.ami_release_version}",
            f"  FSx:          {config.fsx_deployment_type} {config.fsx_storage_gib:,} GiB at /data, "
            f"etcd {'on' if config.etcd_enabled else 'off'}",
            monitoring_review(config),
            *node_fit(config).review_lines(training=config.training_enabled),
            *training_review(config),
            *(f"warning: {line}" for line in training_warnings(config)),
            *(f"warning: {line}" for line in compatibility_warnings(config)),
            *(f"warning: {line}" for line in ami_warnings(config)),
            *(
                f"warning: {addon} is not verified for Kubernetes {config.kubernetes_version}; EKS refuses "
                "versions it does not offer (check `aws eks describe-addon-versions`)"
                for addon in unverified_addons(config.kubernetes_version)
            ),
        ]
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


#: Published BERT-large phase-1 throughput per node (sequences/s): Neuron 2.28, trn1.32xlarge,
#: BF16, AdamW, global batch 16,384 (Neuron performance page). Other types: not published.
PUBLISHED_SEQ_PER_S_PER_NODE = {"trn1.32xlarge": 3826.6}
#: What the reference's 2-node EKS walkthrough logged.
WALKTHROUGH_SEQ_PER_S_2_NODES = 6450.0


def training_review(c: PlatformConfig) -> list[str]:
    """Review lines for ``cdk synth``: workers, global batch, cost and estimated phase-1 time."""
    if not c.training_enabled:
        return ["  training:     off (training_enabled=false)"]
    spec = c.training
    plan = c.training_plan
    facts = c.facts
    sequences = spec.max_steps * spec.global_batch
    lines = [
        f"  training:     BERT-{spec.model}, {plan.workers} workers ({c.desired_nodes} x "
        f"{plan.nproc_per_node}), micro-batch {plan.batch_size} x accumulation {plan.grad_accum_usteps} "
        f"= global batch {plan.global_batch:,}",
        f"  schedule:     {spec.max_steps:,} steps = {sequences:,} sequences, "
        f"rendezvous {spec.rdzv_backend}, checkpoint every {spec.checkpoint_every} steps",
    ]
    lines += image_review_lines(
        context_bytes=context_bytes(build_context()), fast_image_pull=c.fast_image_pull
    )
    if c.preparation_enabled:
        lines.append(
            f"  dataset:      prepared from {c.preparation_corpus} by {c.preparation_pods} pods x "
            f"{c.preparation_cpus_per_pod} CPUs into /data/datasets/{spec.dataset_name}"
        )
    per_node = PUBLISHED_SEQ_PER_S_PER_NODE.get(facts.name)
    price = facts.on_demand_usd_per_hour
    estimates = []
    if per_node is not None:
        estimates.append((f"published {per_node:,.1f} seq/s/node", per_node * c.desired_nodes))
        if facts.name == "trn1.32xlarge" and c.desired_nodes == 2:
            estimates.append(("walkthrough's 2-node EKS run", WALKTHROUGH_SEQ_PER_S_2_NODES))
    if not estimates:
        lines.append(f"  estimate:     no published throughput for {facts.name}")
    for label, rate in estimates:
        hours = sequences / rate / 3600
        cost = f", ${hours * price * c.desired_nodes:,.0f} on demand" if price is not None else ""
        lines.append(f"  estimate:     {rate:,.0f} seq/s ({label}): {hours:,.1f} h{cost}")
    return lines
