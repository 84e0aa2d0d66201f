"""The platform's alerts, as one PrometheusRule: each with a severity, a summary and a runbook line.

Expressions read only series of :mod:`.catalog` and stay within PromQL that Prometheus 2.42
evaluates (the ``promtool`` the tests run; the chart's Prometheus is v3.14.0): no function or
syntax newer than that. Every alert has a ``promtool test rules`` case that fires and one that
stays silent on a healthy run (tests/trainium_eks/monitoring).

"During a run" means the training script stepped in the last :data:`RUNNING_WINDOW_S` seconds:
precompilation and the wait for the dataset leave cores idle and EFA quiet by design.

With ``trainium_capacity=karpenter`` (``karpenter_capacity``), ``TrainiumCapacityMissing`` says
what a waiting gang lacks: Karpenter's launches of the NodePool's one instance type in its one AZ
fail for EC2 capacity or the account's quota (:mod:`.karpenter`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainium_job.naming import TASK_NAME
from trainium_job.node_health import FAILED_TAINT_KEY

from . import scrape
from .karpenter_capacity import (
    BUILD_INFO,
    INSUFFICIENT_CAPACITY_REASON,
    NODECLAIMS_DISRUPTED,
    KarpenterCapacity,
)
from .names import NAMESPACE, RELEASE_LABEL

#: Seconds since the last optimizer step within which a run counts as running.
RUNNING_WINDOW_S = 300
#: NeuronCore utilization (0-1) under which a node's cores count as idle.
IDLE_UTILIZATION = 0.05
#: EFA traffic (bytes/s, all directions and paths) under which a node of a multi-node run is
#: silent on EFA: a BERT-large data-parallel step all-reduces its ~0.7 GB of bf16 gradients, GB/s
#: on every node, while sockets fallback leaves the EFA counters still.
EFA_SILENT_BYTES_PER_S = 1e6
#: Minutes TrainiumCapacityMissing holds after Karpenter's last failed launch. While pods wait,
#: Karpenter tries an on-demand offering that failed for capacity again 3 minutes later (and counts
#: again if it fails), so the alert stays on through a gang's wait and clears this long after it.
CAPACITY_WINDOW_MINUTES = 15
#: TrainingBudgetNearCeiling fires at this share of the job's spend ceiling (``training_budget_usd``).
BUDGET_ALERT_SHARE = 0.8
#: TrainingRestartingWithoutProgress: this many restarts within the window, and no newer checkpoint.
RESTARTS_WITHOUT_PROGRESS = 3
RESTART_WINDOW_HOURS = 2


@dataclass(frozen=True)
class Alert:
    """One alerting rule. ``summary`` may name labels as ``{{ $labels.<name> }}``."""

    name: str
    expr: str
    for_: str
    severity: str
    summary: str
    runbook: str

    def rule(self) -> dict[str, Any]:
        return {
            "alert": self.name,
            "expr": self.expr,
            "for": self.for_,
            "labels": {"severity": self.severity},
            "annotations": {"summary": self.summary, "runbook": self.runbook},
        }


def _training_pods(namespace: str) -> str:
    # Volcano names a job's pods <job>-<task>-<index> (volcano-sh/volcano v1.15.1
    # pkg/controllers/job/helpers/helpers.go PodNameFmt); TorchX's tasks add one more index.
    return f'kube_pod_info{{namespace="{namespace}", pod=~".+-{TASK_NAME}-[0-9]+(-[0-9]+)?"}}'


def _capacity_missing(capacity: KarpenterCapacity, training_namespace: str) -> Alert:
    failures = (
        f'{NODECLAIMS_DISRUPTED}{{reason="{INSUFFICIENT_CAPACITY_REASON}", nodepool="{capacity.node_pool}"}}'
    )
    window = f"{CAPACITY_WINDOW_MINUTES}m"
    return Alert(
        "TrainiumCapacityMissing",
        # increase() needs two samples of a series, and the first failure after a controller start
        # makes a new series whose first sample is already 1: the second term counts a series that
        # is new within the window, provided Karpenter was scraped at its start (after a gap in
        # Prometheus's data an old count would look new).
        f"sum(increase({failures}[{window}])) > 0"
        f" or (count({failures} unless {failures} offset {window}) and on () count({BUILD_INFO} offset {window}))",
        "0m",
        "critical",
        f"Karpenter cannot launch {capacity.instance_type} in {capacity.az_id}: EC2 has no capacity "
        "(InsufficientInstanceCapacity) or the account's On-Demand Trn vCPU quota is reached (VcpuLimitExceeded)",
        "The gang waits trainium_gang_wait_minutes for all its nodes, then Volcano aborts the job and the "
        "nodes that came are released; kubectl get events -A --field-selector reason=InsufficientCapacityError "
        "shows EC2's error code. Capacity: retry later (vcctl job resume -N <job> -n "
        f"{training_namespace}) or launch into a Capacity Block or On-Demand Capacity Reservation "
        "(capacity_reservation_id). Quota: make doctor shows it and the increase request.",
    )


def _restarting_without_progress() -> Alert:
    # The ledger's totals only grow over a run, but rank 0's series move to another pod or node when
    # the gang restarts, and are absent while it is down: aggregated per job first, then a subquery
    # over the window (increase() would count a new series as none).
    window = f"[{RESTART_WINDOW_HOURS}h:1m]"
    restarts = "sum by (training_job) (max by (training_job, cause) (bert_train_restarts_total))"
    checkpoint = "max by (training_job) (bert_train_last_checkpoint_step)"
    return Alert(
        "TrainingRestartingWithoutProgress",
        f"(max_over_time({restarts}{window}) - min_over_time({restarts}{window})) >= {RESTARTS_WITHOUT_PROGRESS}"
        f" and on (training_job) (max_over_time({checkpoint}{window}) - min_over_time({checkpoint}{window})) == 0",
        "0m",
        "critical",
        f"Job {{{{ $labels.training_job }}}} restarted {RESTARTS_WITHOUT_PROGRESS} times or more in "
        f"{RESTART_WINDOW_HOURS} h without a new checkpoint",
        "The run pays for its nodes and keeps redoing the same steps. Rank 0's last log line of each "
        "attempt and <output_dir>/restarts.jsonl on FSx give each restart's cause and node "
        "(python -m trainium_job.restarts summary --run-dir /data/runs/<run> prints the totals): "
        "cordon a node named for hangs or the fabric and delete the job's pods; preemptions in a row "
        "mean the capacity is going away; failures mean reading the log. vcctl job suspend stops the spending.",
    )


def _program_alerts() -> list[Alert]:
    """The alerts of the training pods' own program (trainium_job.pod_program.metrics): nodes held
    without training past the bound the job's description derives, and the spend near its ceiling."""
    held = "max by (training_job, node) (trainium_job_not_training_since_timestamp_seconds)"
    bound = "max by (training_job, node) (trainium_job_start_bound_seconds)"
    spend = "max by (training_job) (trainium_job_spend_usd)"
    ceiling = "max by (training_job) (trainium_job_budget_usd)"
    return [
        Alert(
            "TrainiumNodeHeldWithoutTraining",
            f"(time() - {held}) > {bound}",
            "5m",
            "critical",
            "A pod of job {{ $labels.training_job }} has held Trainium node {{ $labels.node }} without "
            "training for longer than its bounded start",
            "Every wait of the pod has a deadline (the review's staging lines) and ends the job when it "
            "passes, so its own bound was not kept: kubectl logs of the pod says what it waits for "
            "(its dataset, the precompile, the checks). Delete the job's submitter (kubectl delete job -n "
            "training submit-<job>): its Volcano Job goes with it and the nodes are released. A deploy "
            "with unchanged settings applies nothing: destroy the training stack and deploy it again.",
        ),
        Alert(
            "TrainingBudgetNearCeiling",
            f"{spend} >= {BUDGET_ALERT_SHARE:g} * {ceiling}",
            "0m",
            "warning",
            f"Job {{{{ $labels.training_job }}}} has spent {BUDGET_ALERT_SHARE:.0%} of its ceiling "
            "(training_budget_usd)",
            "At the ceiling the job checkpoints, exports the model of the phase in flight and ends. To go "
            "on, raise training_budget_usd and redeploy the training stack: the job resumes from its "
            "checkpoint. The review's estimate and budget lines say what a healthy run costs.",
        ),
    ]


def _training_alerts(training_namespace: str, *, stall_minutes: int) -> list[Alert]:
    """The alerts of a training run: no steps, idle NeuronCores, no EFA traffic, old checkpoints."""
    pods = _training_pods(training_namespace)
    job_nodes = f"max by (node) ({pods})"
    running = f"(time() - max(bert_train_last_step_timestamp_seconds) < {RUNNING_WINDOW_S})"
    return [
        Alert(
            "TrainingStalled",
            f"time() - max by (training_job) (bert_train_last_step_timestamp_seconds) > {stall_minutes * 60}",
            "1m",
            "critical",
            f"Training job {{{{ $labels.training_job }}}} made no optimizer step for {stall_minutes} minutes",
            "Read rank 0's log (kubectl logs -n training <job>-worker-0); a hung collective logs nothing. "
            "Delete the job's pods: Volcano restarts the gang and it resumes from its last checkpoint.",
        ),
        Alert(
            "NeuronCoresIdle",
            f"(avg by (node) (neuroncore_utilization_ratio) < {IDLE_UTILIZATION}"
            " or (max by (node) (neuron_hardware_info) unless on (node) max by (node) (neuroncore_utilization_ratio)))"
            f" and on (node) {job_nodes} and on () {running}",
            "10m",
            "warning",
            "NeuronCores of node {{ $labels.node }} are idle while the training job runs",
            "Run neuron-top in the node's training pod; idle cores with steps going on mean the input "
            "pipeline or the host is the bottleneck, no runtime at all means the node's workers died.",
        ),
        Alert(
            "EfaTrafficAbsent",
            'sum by (node) (rate({__name__=~"efa_(tx|rx|rdma_read|rdma_write)_bytes_total"}[5m]))'
            f" < {EFA_SILENT_BYTES_PER_S:g} and on (node) {job_nodes}"
            f" and on () (count({job_nodes}) > 1) and on () {running}",
            "10m",
            "critical",
            "No EFA traffic on node {{ $labels.node }} during a multi-node run",
            "The collectives fell back to TCP: check the pod got vpc.amazonaws.com/efa devices and "
            "FI_PROVIDER=efa (kubectl describe pod), and that the EFA device plugin runs on the node; "
            "the next start's fabric check names the node.",
        ),
        Alert(
            "CheckpointOverdue",
            "max by (training_job) (bert_train_step - bert_train_last_checkpoint_step)"
            " > 2 * max by (training_job) (bert_train_checkpoint_interval_steps)",
            "5m",
            "warning",
            "Job {{ $labels.training_job }}'s newest checkpoint is more than two intervals old",
            "Two checkpoint writes failed or were skipped: look for checkpoint errors in rank 0's log "
            "and for a full FSx (FsxFreeCapacityLow); a restart now would lose the steps since.",
        ),
    ]


def _node_alerts(*, fsx_free_percent: int) -> list[Alert]:
    """The alerts of the nodes and the file system: Neuron device errors, a full FSx, a node not Ready."""
    return [
        Alert(
            "NeuronHardwareErrors",
            "sum by (node) (increase(hardware_ecc_events_total"
            '{event_type=~"mem_ecc_uncorrected|sram_ecc_uncorrected"}[15m])) > 0',
            "0m",
            "critical",
            "Uncorrected ECC errors on the Neuron devices of node {{ $labels.node }}",
            "The device's memory is failing: cordon the node (kubectl cordon) and let the nodegroup "
            "replace it (the EKS node monitoring agent marks it for auto repair); the job resumes elsewhere.",
        ),
        Alert(
            "NeuronExecutionErrors",
            # "transient" is the one type Neuron documents as recoverable ("recoverable errors, such as
            # ECC corrections"): counted, it fires on healthy runs (tests/contracts/neuron_monitor.py).
            'sum by (node) (increase(execution_errors_total{error_type!="transient"}[15m])) > 0',
            "0m",
            "warning",
            "The Neuron runtime on node {{ $labels.node }} reports execution errors",
            "Read the node's training pod log for NRT errors; hardware errors repeating on one node "
            "mean a device to replace, numerical ones a diverging run (look at the loss).",
        ),
        Alert(
            "FsxFreeCapacityLow",
            "min by (mountpoint) (fsx_filesystem_avail_bytes / fsx_filesystem_size_bytes)"
            f" < {fsx_free_percent / 100:g}",
            "15m",
            "warning",
            f"Less than {fsx_free_percent}% of the FSx file system is free",
            "Delete old runs' checkpoints under /data/runs (keep_checkpoints) or grow the file system "
            "(fsx_storage_gib, in steps of 2400 GiB); a full file system fails the next checkpoint.",
        ),
        Alert(
            "TrainiumNodeNotReady",
            'max by (node) (kube_node_status_condition{condition="Ready", status="true"}) == 0'
            ' and on (node) max by (node) (kube_node_labels{label_trainium_eks_pool="trainium"})',
            "5m",
            "critical",
            "Trainium node {{ $labels.node }} is not Ready",
            "kubectl describe node shows the failing condition; the nodegroup's auto repair replaces "
            "nodes that stay unhealthy, and the job restarts once the gang can be scheduled again.",
        ),
    ]


def alerts(
    *,
    training_namespace: str,
    stall_minutes: int = 15,
    fsx_free_percent: int = 10,
    karpenter_capacity: KarpenterCapacity | None = None,
) -> list[Alert]:
    """The platform's alerts (``training_namespace``: where the training pods run;
    ``karpenter_capacity``: the NodePool Karpenter launches the Trainium nodes for, if it does)."""
    training_job = scrape.training_pod_monitor(training_namespace)["metadata"]
    training_scrape = f"{training_job['namespace']}/{training_job['name']}"
    platform_alerts = [
        *_training_alerts(training_namespace, stall_minutes=stall_minutes),
        *_program_alerts(),
        *_node_alerts(fsx_free_percent=fsx_free_percent),
        Alert(
            # The chart's TargetDown, less the training pods (their endpoint lives only while the
            # script runs): the chart's own is disabled (stack_values).
            "TargetDown",
            f'100 * (count by (job, namespace, service) (up{{job!="{training_scrape}"}} == 0)'
            f' / count by (job, namespace, service) (up{{job!="{training_scrape}"}})) > 10',
            "10m",
            "warning",
            "{{ $labels.job }} targets in {{ $labels.namespace }} are down",
            "Prometheus's Targets page names the failing endpoints and their errors; a DaemonSet "
            "target down on one node often means that node is short of resources.",
        ),
        _restarting_without_progress(),
        Alert(
            "TrainiumNodeFailedHealthCheck",
            f'max by (node, value) (kube_node_spec_taint{{key="{FAILED_TAINT_KEY}"}}) > 0',
            "0m",
            "warning",
            "Trainium node {{ $labels.node }} failed its {{ $labels.value }} health check",
            "The node is kept out of training (tainted). kubectl get events -A --field-selector "
            "reason=TrainiumNodeHealthCheckFailed says what was expected and found; with "
            "trainium_health_replace the node is being replaced (reason TrainiumNodeReplaced), else "
            "inspect it, then terminate its instance or check it again (docs/healing.md). A 'fabric' "
            "value: the pre-training fabric check named it.",
        ),
    ]
    if karpenter_capacity is not None:
        platform_alerts.append(_capacity_missing(karpenter_capacity, training_namespace))
    return platform_alerts


def rule_groups(**options: Any) -> list[dict[str, Any]]:
    """The rule file's groups (what ``promtool check rules`` reads)."""
    return [{"name": "trainium-training", "rules": [a.rule() for a in alerts(**options)]}]


def prometheus_rule(**options: Any) -> dict[str, Any]:
    """The PrometheusRule object (labelled for the chart's Prometheus)."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "trainium-training", "namespace": NAMESPACE, "labels": dict(RELEASE_LABEL)},
        "spec": {"groups": rule_groups(**options)},
    }
