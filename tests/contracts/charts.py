"""The Helm values each chart the platform installs reads, at the pinned chart version, and how
its DaemonSets are scheduled (node selectors, tolerations), as its templates render them.

Values entries are dotted paths. ``kind="map"``: the keys under it are free (a node selector);
``kind="list"``: a list (Helm replaces a list given in values, it does not merge it).

Adding a chart: a ``Contract`` of its values read at the pinned
version, with citations, registered in :data:`CHART_VALUES` under the chart's name; a chart the
stacks install without an entry there fails ``test_helm_values``.
"""

from __future__ import annotations

from dataclasses import dataclass

from tests.contracts.karpenter_metrics import CHART_SERVICE_MONITOR
from tests.contracts.kube_prometheus_stack import KUBE_PROMETHEUS_STACK
from tests.contracts.model import Contract, Entry

_FSX = "kubernetes-sigs/aws-fsx-csi-driver@helm-chart-aws-fsx-csi-driver-1.17.0:charts/aws-fsx-csi-driver"
_EFA = "aws/eks-charts@bfe91c4:stable/aws-efa-k8s-device-plugin"
_VOLCANO = "volcano-sh/volcano@v1.15.0:installer/helm/chart/volcano"
_KARPENTER = "aws/karpenter-provider-aws@v1.14.1:charts/karpenter"
#: Chart 1.10.0's values as ``helm show values oci://public.ecr.aws/neuron/neuron-helm-chart
#: --version 1.10.0`` prints them (digest sha256:ed5d8f73...), recorded in a public Trainium
#: workshop (2026-09); the chart's repository snapshot available here is older.
_NEURON = "neuron-helm-chart 1.10.0 values (helm show values, digest sha256:ed5d8f73)"

FSX_CSI_DRIVER = Contract(
    consumer="aws-fsx-csi-driver chart",
    version="1.17.0",
    entries=(
        Entry(
            "controller.region",
            "the controller's AWS_REGION (empty: looked up from IMDS)",
            f"{_FSX}/values.yaml:99; templates/controller-deployment.yaml:74-75",
        ),
        Entry(
            "controller.nodeSelector",
            "added to kubernetes.io/os: linux on the controller Deployment",
            f"{_FSX}/values.yaml:77; templates/controller-deployment.yaml:32-35",
            kind="map",
        ),
        Entry(
            "controller.serviceAccount.create",
            "create the controller's service account",
            f"{_FSX}/values.yaml:88",
        ),
        Entry(
            "controller.serviceAccount.name",
            "its name (default fsx-csi-controller-sa)",
            f"{_FSX}/values.yaml:91",
        ),
        Entry(
            "controller.serviceAccount.annotations", "its annotations", f"{_FSX}/values.yaml:92", kind="map"
        ),
        Entry("controller.replicaCount", "controller replicas (default 2)", f"{_FSX}/values.yaml:78"),
        Entry("controller.tolerations", "controller tolerations", f"{_FSX}/values.yaml:100", kind="list"),
        Entry(
            "node.tolerateAllTaints",
            "true (the default): the node DaemonSet tolerates every taint ({operator: Exists})",
            f"{_FSX}/values.yaml:191; templates/node-daemonset.yaml:47-49",
        ),
        Entry(
            "node.tolerations",
            "node tolerations when tolerateAllTaints is false",
            f"{_FSX}/values.yaml:192",
            kind="list",
        ),
        Entry("node.nodeSelector", "node DaemonSet node selector", f"{_FSX}/values.yaml:155", kind="map"),
    ),
)

EFA_DEVICE_PLUGIN = Contract(
    consumer="aws-efa-k8s-device-plugin chart",
    version="v0.5.30",
    entries=(
        Entry(
            "nodeSelector",
            "the DaemonSet's node selector (the chart's affinity to its EFA instance list applies too)",
            f"{_EFA}/values.yaml:328; templates/daemonset.yaml:45-48",
            kind="map",
        ),
        Entry(
            "tolerations",
            "appended to the built-in CriticalAddonsOnly toleration",
            f"{_EFA}/values.yaml:332; templates/daemonset.yaml:34-39",
            kind="list",
        ),
        Entry(
            "resources",
            "container resources (requests cpu 10m, memory 20Mi)",
            f"{_EFA}/values.yaml:317-327",
            kind="map",
        ),
        Entry(
            "supportedInstanceLabels.values",
            "instance types of the required node affinity (trn1.32xlarge, trn1n.32xlarge; not trn1.2xlarge)",
            f"{_EFA}/values.yaml:13-316 (trn1: 286-287); templates/daemonset.yaml:49-58",
            kind="list",
        ),
    ),
)

VOLCANO = Contract(
    consumer="volcano chart",
    version="1.15.0",
    entries=(
        Entry(
            "basic.image_pull_policy",
            "imagePullPolicy of every Volcano container",
            f"{_VOLCANO}/values.yaml:12; templates/admission.yaml:157",
            values=("Always", "IfNotPresent", "Never"),
        ),
        *(
            Entry(
                f"custom.{component}_ns",
                f"node selector of the {component} pods (falls back to custom.default_ns)",
                f"{_VOLCANO}/values.yaml:{line}; templates/{template}",
                kind="map",
            )
            for component, line, template in (
                ("default", 173, "admission.yaml:6, controllers.yaml:6, scheduler.yaml:6"),
                ("admission", 174, "admission.yaml:6,119-120"),
                ("scheduler", 175, "scheduler.yaml:6,179-180"),
                ("controller", 176, "controllers.yaml:6,151-152"),
                ("kube_state_metrics", 177, "kube-state-metrics templates"),
                ("agent", 178, "agent.yaml"),
            )
        ),
        Entry(
            "custom.scheduler_config_override",
            "replaces the scheduler's configuration file (the chart's config/volcano-scheduler.conf)",
            f"{_VOLCANO}/values.yaml:115; templates/scheduler.yaml:18-22",
        ),
    ),
)

NEURON = Contract(
    consumer="neuron-helm-chart",
    version="1.10.0",
    entries=(
        Entry("devicePlugin.enabled", "install the device plugin DaemonSet (default true)", _NEURON),
        Entry("devicePlugin.nodeSelector", "its node selector (default {})", _NEURON, kind="map"),
        Entry(
            "devicePlugin.tolerations",
            "its tolerations; default CriticalAddonsOnly, aws.amazon.com/neuron Exists NoSchedule and a "
            "SageMaker health taint (a given list replaces them)",
            _NEURON,
            kind="list",
        ),
        Entry("devicePlugin.resources", "its resources (default none: BestEffort)", _NEURON, kind="map"),
        Entry("scheduler.enabled", "the Neuron scheduler extension (default false)", _NEURON),
        Entry("scheduler.nodeSelector", "its node selector", _NEURON, kind="map"),
        Entry("scheduler.tolerations", "its tolerations", _NEURON, kind="list"),
        Entry("scheduler.customScheduler.enabled", "the bundled kube-scheduler (v1.31.12)", _NEURON),
        Entry("scheduler.customScheduler.nodeSelector", "its node selector", _NEURON, kind="map"),
        Entry("npd.enabled", "node-problem-detector DaemonSet (default TRUE)", _NEURON),
        Entry("npd.namespaceOverride", "its namespace (default neuron-healthcheck-system)", _NEURON),
        Entry("npd.nodeSelector", "its node selector", _NEURON, kind="map"),
        Entry(
            "npd.tolerations",
            "its tolerations (default: every NoSchedule and NoExecute taint)",
            _NEURON,
            kind="list",
        ),
        Entry("npd.nodeRecovery.enabled", "the node-recovery agent (default false)", _NEURON),
        Entry("draDriver.enabled", "the Neuron DRA driver (default false)", _NEURON),
        Entry("ultraserverOperator.enabled", "the UltraServer operator (default false)", _NEURON),
    ),
)

#: Chart name (as installed) -> the values it reads.
KARPENTER = Contract(
    consumer="karpenter chart",
    version="1.14.1",
    entries=(
        Entry(
            "serviceAccount.name",
            "the controller's service account (default: the release's full name)",
            f"{_KARPENTER}/values.yaml:23; templates/_helpers.tpl:59-65; templates/deployment.yaml:39",
        ),
        Entry(
            "replicas",
            "controller replicas (default 2)",
            f"{_KARPENTER}/values.yaml:49; templates/deployment.yaml:13",
        ),
        Entry(
            "nodeSelector",
            "the controller's node selector (default kubernetes.io/os: linux)",
            f"{_KARPENTER}/values.yaml:90-91; templates/deployment.yaml:252-255",
            kind="map",
        ),
        Entry(
            "topologySpreadConstraints",
            "the controller's spread (default: zones, DoNotSchedule); the template adds its label selector",
            f"{_KARPENTER}/values.yaml:104-107; templates/deployment.yaml:262-267",
            kind="list",
        ),
        Entry(
            "controller.resources",
            "the controller container's resources (default {})",
            f"{_KARPENTER}/values.yaml:145; templates/deployment.yaml:226-227",
            kind="map",
        ),
        Entry(
            "settings.clusterName",
            "CLUSTER_NAME; the chart refuses to render without it",
            f"{_KARPENTER}/values.yaml:196; templates/deployment.yaml:150-151",
            required=True,
        ),
        Entry(
            "settings.interruptionQueue",
            "INTERRUPTION_QUEUE, the SQS queue's name; empty: no interruption handling",
            f"{_KARPENTER}/values.yaml:209; templates/deployment.yaml:168-170; "
            "pkg/controllers/controllers.go:122-126",
        ),
        Entry(
            "settings.featureGates.nodeRepair",
            "NodeRepair in FEATURE_GATES (alpha, default false)",
            f"{_KARPENTER}/values.yaml:233; templates/deployment.yaml:128-129",
            values=("True", "False"),
        ),
        Entry(
            "settings.featureGates.reservedCapacity",
            "ReservedCapacity in FEATURE_GATES (beta, default true)",
            f"{_KARPENTER}/values.yaml:239; templates/deployment.yaml:128-129",
            values=("True", "False"),
        ),
        # The ServiceMonitor of the platform's Prometheus (tests/contracts/karpenter_metrics.py).
        *CHART_SERVICE_MONITOR.entries,
    ),
)

#: The CRD chart reads one value, which the platform does not set.
KARPENTER_CRD = Contract(
    consumer="karpenter-crd chart",
    version="1.14.1",
    entries=(
        Entry(
            "additionalAnnotations",
            "annotations added to every CRD",
            "aws/karpenter-provider-aws@v1.14.1:charts/karpenter-crd/values.yaml:2",
            kind="map",
        ),
    ),
)

CHART_VALUES: dict[str, Contract] = {
    "karpenter": KARPENTER,
    "karpenter-crd": KARPENTER_CRD,
    "aws-fsx-csi-driver": FSX_CSI_DRIVER,
    "aws-efa-k8s-device-plugin": EFA_DEVICE_PLUGIN,
    "volcano": VOLCANO,
    "neuron-helm-chart": NEURON,
    "kube-prometheus-stack": KUBE_PROMETHEUS_STACK,
}


@dataclass(frozen=True)
class DaemonSetScheduling:
    """How a chart's DaemonSet gets its node selector and tolerations from values.

    Attributes:
        selector: values path of its node selector (a map).
        tolerations: values path of its toleration list.
        default_tolerations: what the chart uses when values give no list.
        built_in: tolerations the template always adds (values are appended to them).
        tolerate_all: values path of a switch that replaces every toleration by
            ``{operator: Exists}``, and its default; None where there is none.
        source: the template lines.
    """

    selector: str
    tolerations: str
    default_tolerations: tuple[dict[str, str], ...]
    built_in: tuple[dict[str, str], ...]
    tolerate_all: tuple[str, bool] | None
    source: str


_CRITICAL = {"key": "CriticalAddonsOnly", "operator": "Exists"}

#: Chart name -> its DaemonSets that serve every node of a kind (device plugins, the CSI node plugin).
DAEMONSETS: dict[str, dict[str, DaemonSetScheduling]] = {
    "neuron-helm-chart": {
        "device plugin": DaemonSetScheduling(
            selector="devicePlugin.nodeSelector",
            tolerations="devicePlugin.tolerations",
            default_tolerations=(
                _CRITICAL,
                {"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoSchedule"},
                {
                    "key": "sagemaker.amazonaws.com/node-health-status",
                    "operator": "Equal",
                    "value": "Unschedulable",
                    "effect": "NoSchedule",
                },
            ),
            built_in=(),
            tolerate_all=None,
            source=_NEURON,
        ),
    },
    "aws-efa-k8s-device-plugin": {
        "device plugin": DaemonSetScheduling(
            selector="nodeSelector",
            tolerations="tolerations",
            default_tolerations=(),
            built_in=(_CRITICAL,),
            tolerate_all=None,
            source=f"{_EFA}/templates/daemonset.yaml:34-48",
        ),
    },
    "aws-fsx-csi-driver": {
        "node plugin": DaemonSetScheduling(
            selector="node.nodeSelector",
            tolerations="node.tolerations",
            default_tolerations=({"operator": "Exists", "effect": "NoExecute"},),
            built_in=({"key": "fsx.csi.aws.com/agent-not-ready", "operator": "Exists"},),
            tolerate_all=("node.tolerateAllTaints", True),
            source=f"{_FSX}/values.yaml:191-196; templates/node-daemonset.yaml:47-57",
        ),
    },
}

#: Values paths of the other node selectors the charts render into pods.
SELECTOR_PATHS: dict[str, tuple[str, ...]] = {
    "aws-fsx-csi-driver": ("controller.nodeSelector", "node.nodeSelector"),
    "aws-efa-k8s-device-plugin": ("nodeSelector",),
    "volcano": tuple(f"custom.{c}_ns" for c in ("default", "admission", "scheduler", "controller")),
    "neuron-helm-chart": (
        "devicePlugin.nodeSelector",
        "scheduler.nodeSelector",
        "scheduler.customScheduler.nodeSelector",
        "npd.nodeSelector",
    ),
}
