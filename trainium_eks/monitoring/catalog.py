"""Every metric name the dashboard and the alert rules read, with the exporter that emits it.

The names are taken from each exporter's documentation or source (cited per exporter below);
tests parse every panel query and rule expression and fail on a name missing here, so a query
can only read a series something on the platform actually emits.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainium_job.efa_counter_names import PORT_COUNTERS
from trainium_job.pod_program.metrics import PROGRAM_METRICS
from trainium_job.telemetry import TRAINING_METRICS

from .karpenter_capacity import BUILD_INFO, NODECLAIMS_DISRUPTED


@dataclass(frozen=True)
class Source:
    """Who emits a metric and where its name is written down."""

    exporter: str
    citation: str


_NEURON_MONITOR = Source(
    "neuron-monitor (neuron-monitor-prometheus.py, public.ecr.aws/neuron/neuron-monitor:1.3.0)",
    "aws-neuron-sdk src/examples/neuron-monitor/neuron-monitor-grafana.json (Neuron's dashboard for "
    "this exporter) and the script's metric definitions (process_neuroncore_counters, "
    "process_memory_used, process_execution_stats, process_neuron_hw_counters, "
    "process_neuron_hardware_info); fields per the Neuron Monitor User Guide",
)
_NODE_EXPORTER = Source(
    "node-exporter v1.12.1 (kube-prometheus-stack 88.5.3)",
    "prometheus/node_exporter v1.12.1 collector/meminfo.go L26-50 (node_memory_<field>_bytes from "
    "/proc/meminfo), collector/cpu_common.go L27-28 (node_cpu_seconds_total)",
)
_KSM = Source(
    "kube-state-metrics v2.20.0 (kube-prometheus-stack 88.5.3)",
    "kubernetes/kube-state-metrics v2.20.0 docs/metrics/cluster/node-metrics.md L7, L15; "
    "docs/metrics/workload/pod-metrics.md L8; label keys sanitized by internal/store/utils.go L148",
)
_KSM_TAINT = Source(
    "kube-state-metrics v2.20.0 (kube-prometheus-stack 88.5.3)",
    "kubernetes/kube-state-metrics docs/metrics/cluster/node-metrics.md, row kube_node_spec_taint "
    "(labels node, key, value, effect; STABLE; L10 at 08c753e)",
)
_TRAINING = Source(
    "training.trainer.pretrain --metrics_port (training/trainer/prom_metrics.py)",
    "trainium_job/telemetry.py TRAINING_METRICS",
)
_PROGRAM = Source(
    "the training pods' program (python -m trainium_job.pod_program, its port 'program')",
    "trainium_job/pod_program/metrics.py PROGRAM_METRICS",
)
_EFA = Source(
    "EFA exporter (training/node/efa_exporter.py)",
    "Linux drivers/infiniband/hw/efa/efa_verbs.c EFA_DEFINE_PORT_STATS (training/node/efa_counters.py)",
)
_FSX = Source(
    "FSx exporter (training/node/fsx_exporter.py)", "training/node/fsx_exporter.py StatvfsCollector"
)
_KARPENTER = Source(
    "Karpenter controller 1.14.1 (the karpenter chart's ServiceMonitor, trainium_capacity=karpenter only)",
    "kubernetes-sigs/karpenter v1.14.1 pkg/metrics/metrics.go L61-74 (NodeClaimsDisruptedTotal), "
    "pkg/operator/operator.go L70-95 (BuildInfo); tests/contracts/karpenter_metrics.py",
)
_PROMETHEUS = Source(
    "Prometheus itself", "Prometheus docs, 'Jobs and instances': the up series of every target"
)

CATALOG: dict[str, Source] = {
    **dict.fromkeys(
        (
            "neuroncore_utilization_ratio",
            "neuron_runtime_memory_used_bytes",
            "execution_errors_total",
            "execution_status_total",
            "hardware_ecc_events_total",
            "neuron_hardware_info",
        ),
        _NEURON_MONITOR,
    ),
    **dict.fromkeys(
        ("node_memory_MemTotal_bytes", "node_memory_MemAvailable_bytes", "node_cpu_seconds_total"),
        _NODE_EXPORTER,
    ),
    **dict.fromkeys(("kube_node_labels", "kube_node_status_condition", "kube_pod_info"), _KSM),
    "kube_node_spec_taint": _KSM_TAINT,
    **dict.fromkeys(TRAINING_METRICS, _TRAINING),
    **dict.fromkeys(PROGRAM_METRICS, _PROGRAM),
    **dict.fromkeys((f"efa_{name}_total" for name in PORT_COUNTERS), _EFA),
    "efa_devices": _EFA,
    **dict.fromkeys(
        (
            "fsx_filesystem_size_bytes",
            "fsx_filesystem_avail_bytes",
            "fsx_filesystem_files",
            "fsx_filesystem_files_free",
        ),
        _FSX,
    ),
    **dict.fromkeys((NODECLAIMS_DISRUPTED, BUILD_INFO), _KARPENTER),
    "up": _PROMETHEUS,
}
