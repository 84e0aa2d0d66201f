"""Every DaemonSet the platform puts on a Trainium node, with its per-node requests: the one
registry the training pod's size subtracts (:mod:`trainium_eks.jobs.node_fit`).

Where the requests come from:

* Helm charts (not rendered offline): each chart's default ``values.yaml`` entries its
  DaemonSets read, in :data:`CHART_FACTS` keyed by chart and version with their source, MERGED
  with the values the platform passes (Helm's rule: maps merge, our keys win). A values change
  that sets ``resources`` or turns a DaemonSet on is seen; a chart version without facts is an
  error until someone reads its chart.
* EKS managed add-ons (and the kube-proxy EKS bootstraps): :data:`ADDON_DAEMONS`, cited.
* The platform's own manifests: read from the objects themselves (:func:`manifest_daemons`).

:func:`trainium_eks.addons.registry.trainium_node_daemons` lists them for a configuration,
each add-on's from its declaration's ``daemons``; tests/trainium_eks/addons/test_node_daemons.py
derives the same list from the synthesized templates (every Helm release, add-on and DaemonSet
manifest), so a DaemonSet added without an entry fails there. A new add-on with DaemonSets on
Trainium nodes lists them in its ``daemons`` (and its chart's facts in :data:`CHART_FACTS`, or
its manifests through :func:`manifest_daemons`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from trainium_job.allocatable import Resources
from trainium_job.instances import InstanceFacts
from trainium_job.node_health import HEALTH_LABEL, PASSED
from trainium_job.scheduling import INSTANCE_TYPE_LABEL, NEURON_TAINT, TRAINIUM_NODE_LABEL

from ..nodes.health_checks import NAME as NODE_HEALTH_CHECK
from ..versions import AddonPin


@dataclass(frozen=True)
class NodeDaemon:
    """One DaemonSet's pod on a Trainium node: its name, requests (pods=1) and their source."""

    name: str
    requests: Resources
    source: str


def total(daemons: Iterable[NodeDaemon]) -> Resources:
    """The requests of ``daemons`` together (pods counted)."""
    out = Resources()
    for daemon in daemons:
        out = out + daemon.requests
    return out


# ---------------------------------------------------------------------------------------------
# Placement: whether a pod spec lands on a Trainium node of a given type.


def trainium_node_labels(instance_type: str) -> dict[str, str]:
    """The labels a Trainium node carries that node selectors may name, once it has passed the
    node health check (what training pods in nodegroup mode require)."""
    return {
        **TRAINIUM_NODE_LABEL,
        HEALTH_LABEL: PASSED,
        INSTANCE_TYPE_LABEL: instance_type,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
    }


def tolerates_trainium_taint(tolerations: Iterable[Mapping[str, Any]] | None) -> bool:
    """Whether ``tolerations`` tolerate the Trainium nodes' taint (Kubernetes' matching rules)."""
    taint = NEURON_TAINT
    for t in tolerations or ():
        if t.get("effect") not in (None, "", taint["effect"]):
            continue
        operator = t.get("operator", "Equal")
        key = t.get("key")
        if operator == "Exists" and key in (None, "", taint["key"]):
            return True
        if operator == "Equal" and key == taint["key"] and t.get("value") == taint["value"]:
            return True
    return False


def selects_trainium_node(node_selector: Mapping[str, str] | None, instance_type: str) -> bool:
    """Whether ``node_selector`` matches a Trainium node of ``instance_type``."""
    labels = trainium_node_labels(instance_type)
    return all(labels.get(k) == v for k, v in (node_selector or {}).items())


def on_trainium(pod_spec: Mapping[str, Any], instance_type: str) -> bool:
    """Whether a pod with this spec's node selector and tolerations runs on the Trainium nodes."""
    return selects_trainium_node(pod_spec.get("nodeSelector"), instance_type) and tolerates_trainium_taint(
        pod_spec.get("tolerations")
    )


def pod_requests(pod_spec: Mapping[str, Any]) -> Resources:
    """A pod's effective requests: its containers' sum, or its largest init container if more
    (Kubernetes' rule for init containers)."""
    containers = [
        Resources.of_requests(c.get("resources", {}).get("requests", {})) for c in pod_spec["containers"]
    ]
    init = [
        Resources.of_requests(c.get("resources", {}).get("requests", {}))
        for c in pod_spec.get("initContainers", [])
    ]
    summed = Resources(sum(r.millicpu for r in containers), sum(r.memory_mib for r in containers), 1)
    return Resources(
        max([summed.millicpu, *(r.millicpu for r in init)]),
        max([summed.memory_mib, *(r.memory_mib for r in init)]),
        1,
    )


#: DaemonSets (by name) whose pod leaves a Trainium node before any training pod can land there,
#: so it takes nothing from the training pod's budget, and why.
PRE_TRAINING_DAEMONS: dict[str, str] = {
    NODE_HEALTH_CHECK: "the node health check (trainium_eks/nodes/health_checks.py) runs only on a node without "
    "the trainium-eks/node-health label, which it sets when it ends; its DaemonSet's pod is then removed. "
    "Until then the node carries the pending taint, which training pods do not tolerate, and the check "
    "holds every Neuron device, which they request",
}


def manifest_daemons(objects: Iterable[Mapping[str, Any]], instance_type: str) -> list[NodeDaemon]:
    """The DaemonSets among the platform's own manifest ``objects`` that run on the Trainium
    nodes beside training, with the requests they declare (not :data:`PRE_TRAINING_DAEMONS`)."""
    found = []
    for obj in objects:
        if obj.get("kind") != "DaemonSet" or obj["metadata"]["name"] in PRE_TRAINING_DAEMONS:
            continue
        spec = obj["spec"]["template"]["spec"]
        if on_trainium(spec, instance_type):
            meta = obj["metadata"]
            found.append(
                NodeDaemon(
                    f"{meta.get('namespace', 'default')}/{meta['name']}",
                    pod_requests(spec),
                    "the platform's own manifest",
                )
            )
    return found


# ---------------------------------------------------------------------------------------------
# Helm charts: default values (cited) merged with ours.

#: A path into a chart's values.
ValuesPath = tuple[str, ...]


def merge_values(defaults: Mapping[str, Any], ours: Mapping[str, Any]) -> dict[str, Any]:
    """Helm's merge of user values over a chart's defaults: maps merge (an empty map keeps the
    defaults), ``None`` (YAML null) deletes a default, anything else replaces."""
    merged = copy.deepcopy(dict(defaults))
    for key, value in ours.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = merge_values(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def lookup(values: Mapping[str, Any], path: ValuesPath) -> Any:
    node: Any = values
    for key in path:
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    return node


@dataclass(frozen=True)
class ChartContainer:
    """A container of a chart's DaemonSet.

    Attributes:
        name: the container's name in the template.
        resources: values paths of its ``resources``, in the template's order of precedence
            (Helm ``default``: the first non-empty one counts).
        fallback: the template's own requests when every path is empty.
        enabled_by: a values path that must be true for the container to exist.
    """

    name: str
    resources: tuple[ValuesPath, ...]
    fallback: Resources = Resources()
    enabled_by: ValuesPath | None = None

    def requests(self, values: Mapping[str, Any]) -> Resources:
        for path in self.resources:
            found = lookup(values, path)
            if found:
                return Resources.of_requests(found.get("requests") or {})
        return self.fallback


@dataclass(frozen=True)
class ChartDaemonSet:
    """A DaemonSet a chart renders, when it exists and whether it runs on Trainium nodes.

    Attributes:
        name: the DaemonSet (``<namespace-of-release>`` is the release's).
        containers: its containers.
        placement: ``(merged values, instance type) -> bool``: on a Trainium node of that type.
        enabled_by: a values path that must be true for the DaemonSet to exist (None: always).
    """

    name: str
    containers: tuple[ChartContainer, ...]
    placement: Callable[[Mapping[str, Any], str], bool]
    enabled_by: ValuesPath | None = None


@dataclass(frozen=True)
class ChartFacts:
    """A chart's DaemonSets and the default values they read, at the versions read."""

    chart: str
    versions: tuple[str, ...]
    defaults: Mapping[str, Any]
    daemonsets: tuple[ChartDaemonSet, ...]
    source: str


def _requests(cpu: str, memory: str) -> dict[str, dict[str, str]]:
    return {"requests": {"cpu": cpu, "memory": memory}}


def _placed(selector: ValuesPath | None, tolerations: ValuesPath, *, fixed: Sequence[Mapping[str, Any]] = ()):
    """A placement rule: the chart's node selector (values path) and tolerations (values path,
    plus the template's ``fixed`` ones)."""

    def placement(values: Mapping[str, Any], instance_type: str) -> bool:
        node_selector = lookup(values, selector) if selector else None
        return selects_trainium_node(node_selector, instance_type) and tolerates_trainium_taint(
            [*fixed, *(lookup(values, tolerations) or [])]
        )

    return placement


def _fsx_node_placement(values: Mapping[str, Any], instance_type: str) -> bool:
    # node-daemonset.yaml: tolerateAllTaints -> [{operator: Exists}], else node.tolerations;
    # nodeSelector kubernetes.io/os: linux (+ node.nodeSelector).
    if not selects_trainium_node(lookup(values, ("node", "nodeSelector")), instance_type):
        return False
    return bool(lookup(values, ("node", "tolerateAllTaints"))) or tolerates_trainium_taint(
        lookup(values, ("node", "tolerations"))
    )


_CRITICAL_ADDONS_ONLY = {"key": "CriticalAddonsOnly", "operator": "Exists"}

#: (chart, version) -> what its DaemonSets request. Each entry names the chart source read.
CHART_FACTS: tuple[ChartFacts, ...] = (
    ChartFacts(
        # kubernetes-sigs/aws-fsx-csi-driver, tags helm-chart-aws-fsx-csi-driver-1.16.0 and -1.17.0
        # (values.yaml identical but image.tag): node.resources 10m/40Mi, sidecars 10m/32Mi each,
        # node.tolerateAllTaints true; templates/node-daemonset.yaml containers fsx-plugin
        # (node.resources), node-driver-registrar and liveness-probe (`default .Values.node.resources
        # .Values.sidecars.<name>.resources`).
        chart="aws-fsx-csi-driver",
        versions=("1.16.0", "1.17.0"),
        defaults={
            "node": {"resources": _requests("10m", "40Mi"), "tolerateAllTaints": True, "nodeSelector": {}},
            "sidecars": {
                "livenessProbe": {"resources": _requests("10m", "32Mi")},
                "nodeDriverRegistrar": {"resources": _requests("10m", "32Mi")},
            },
        },
        daemonsets=(
            ChartDaemonSet(
                "fsx-csi-node",
                (
                    ChartContainer("fsx-plugin", (("node", "resources"),)),
                    ChartContainer(
                        "node-driver-registrar",
                        (("sidecars", "nodeDriverRegistrar", "resources"), ("node", "resources")),
                    ),
                    ChartContainer(
                        "liveness-probe", (("sidecars", "livenessProbe", "resources"), ("node", "resources"))
                    ),
                ),
                _fsx_node_placement,
            ),
        ),
        source="kubernetes-sigs/aws-fsx-csi-driver charts/aws-fsx-csi-driver values.yaml",
    ),
    ChartFacts(
        # aws/eks-charts stable/aws-efa-k8s-device-plugin at v0.5.30 (master 2026-08-07):
        # values.yaml resources.requests cpu 10m / memory 20Mi, nodeSelector {}, tolerations [];
        # templates/daemonset.yaml appends .Values.tolerations to a fixed CriticalAddonsOnly one.
        chart="aws-efa-k8s-device-plugin",
        versions=("v0.5.30",),
        defaults={"resources": _requests("10m", "20Mi"), "nodeSelector": {}, "tolerations": []},
        daemonsets=(
            ChartDaemonSet(
                "aws-efa-k8s-device-plugin",
                (ChartContainer("aws-efa-k8s-device-plugin", (("resources",),)),),
                _placed(("nodeSelector",), ("tolerations",), fixed=(_CRITICAL_ADDONS_ONLY,)),
            ),
        ),
        source="aws/eks-charts stable/aws-efa-k8s-device-plugin values.yaml",
    ),
    ChartFacts(
        # oci://public.ecr.aws/neuron/neuron-helm-chart 1.10.0 (`helm show values`, digest
        # sha256:ed5d8f73...): devicePlugin.resources {} (BestEffort), its tolerations include
        # aws.amazon.com/neuron Exists; npd.enabled true, npd.nodeProblemDetector requests
        # 10m/80Mi, npd.nodeRecovery (off) 10m/150Mi, npd tolerations NoSchedule/NoExecute Exists;
        # draDriver.enabled false, requests 10m/128Mi.
        chart="neuron-helm-chart",
        versions=("1.10.0",),
        defaults={
            "devicePlugin": {
                "enabled": True,
                "resources": {},
                "nodeSelector": {},
                "tolerations": [
                    _CRITICAL_ADDONS_ONLY,
                    {"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoSchedule"},
                ],
            },
            "npd": {
                "enabled": True,
                "nodeSelector": {},
                "tolerations": [
                    {"effect": "NoSchedule", "operator": "Exists"},
                    {"effect": "NoExecute", "operator": "Exists"},
                ],
                "nodeProblemDetector": {"resources": _requests("10m", "80Mi")},
                "nodeRecovery": {"enabled": False, "resources": _requests("10m", "150Mi")},
            },
            "draDriver": {
                "enabled": False,
                "resources": _requests("10m", "128Mi"),
                "nodeSelector": {},
                "tolerations": [
                    {"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoSchedule"}
                ],
            },
        },
        daemonsets=(
            ChartDaemonSet(
                "neuron-device-plugin",
                (ChartContainer("neuron-device-plugin", (("devicePlugin", "resources"),)),),
                _placed(("devicePlugin", "nodeSelector"), ("devicePlugin", "tolerations")),
                enabled_by=("devicePlugin", "enabled"),
            ),
            ChartDaemonSet(
                "neuron-problem-detector",
                (
                    ChartContainer("node-problem-detector", (("npd", "nodeProblemDetector", "resources"),)),
                    ChartContainer(
                        "node-recovery",
                        (("npd", "nodeRecovery", "resources"),),
                        enabled_by=("npd", "nodeRecovery", "enabled"),
                    ),
                ),
                _placed(("npd", "nodeSelector"), ("npd", "tolerations")),
                enabled_by=("npd", "enabled"),
            ),
            ChartDaemonSet(
                "neuron-dra-driver",
                (ChartContainer("neuron-dra-driver", (("draDriver", "resources"),)),),
                _placed(("draDriver", "nodeSelector"), ("draDriver", "tolerations")),
                enabled_by=("draDriver", "enabled"),
            ),
        ),
        source="`helm show values oci://public.ecr.aws/neuron/neuron-helm-chart --version 1.10.0`",
    ),
)

_KPS = "prometheus-community/helm-charts"
#: kube-prometheus-stack's only DaemonSet is its node-exporter subchart's (kube-state-metrics,
#: the operator, Prometheus, Grafana and Alertmanager are Deployments or StatefulSets).
_KUBE_PROMETHEUS_STACK = ChartFacts(
    # kube-prometheus-stack-88.5.3 values.yaml L2711-2712 nodeExporter.enabled true (the
    # prometheus-node-exporter dependency's condition); prometheus-node-exporter-4.56.1
    # values.yaml: resources {} (L334), nodeSelector kubernetes.io/os: linux (L464-465),
    # tolerations [{effect: NoSchedule, operator: Exists}] (L471-473), kubeRBACProxy.enabled
    # false (L42-43: no proxy sidecar).
    chart="kube-prometheus-stack",
    versions=("88.5.3",),
    defaults={
        "nodeExporter": {"enabled": True},
        "prometheus-node-exporter": {
            "resources": {},
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "tolerations": [{"effect": "NoSchedule", "operator": "Exists"}],
        },
    },
    daemonsets=(
        ChartDaemonSet(
            "prometheus-node-exporter",
            (ChartContainer("node-exporter", (("prometheus-node-exporter", "resources"),)),),
            _placed(
                ("prometheus-node-exporter", "nodeSelector"), ("prometheus-node-exporter", "tolerations")
            ),
            enabled_by=("nodeExporter", "enabled"),
        ),
    ),
    source=f"{_KPS} kube-prometheus-stack-88.5.3 and prometheus-node-exporter-4.56.1 values.yaml",
)
CHART_FACTS = (*CHART_FACTS, _KUBE_PROMETHEUS_STACK)

#: Charts whose DaemonSets never run on Trainium nodes with the values the platform passes, and
#: why (the values key that would change that is checked).
CHARTS_OFF_TRAINIUM: dict[str, tuple[ValuesPath, str]] = {
    # volcano-sh/volcano installer/helm/chart/volcano (v1.15.1): the only DaemonSet is the
    # colocation agent (templates/agent.yaml), rendered when custom.colocation_enable is true.
    "volcano": (("custom", "colocation_enable"), "the colocation agent is Volcano's only DaemonSet"),
}


#: Charts with no DaemonSet at all, at the versions read (their templates list none).
CHARTS_WITHOUT_DAEMONSETS: dict[str, tuple[str, str]] = {
    # aws/karpenter-provider-aws v1.14.1 charts/karpenter/templates: a Deployment, its Service,
    # PDB, RBAC and ServiceMonitor; charts/karpenter-crd/templates: the CRDs only.
    "karpenter": ("1.14.1", "a Deployment (on the system nodes), no DaemonSet"),
    "karpenter-crd": ("1.14.1", "CustomResourceDefinitions only"),
}


def chart_facts(chart: str, version: str) -> ChartFacts:
    """The facts of ``chart`` at ``version``; ``KeyError`` asking for them otherwise."""
    for facts in CHART_FACTS:
        if facts.chart == chart and version in facts.versions:
            return facts
    raise KeyError(
        f"no DaemonSet facts for chart {chart} {version}: read its values.yaml and templates and add "
        "them to trainium_eks.addons.node_daemons.CHART_FACTS"
    )


def chart_daemons(
    chart: str, version: str, values: Mapping[str, Any], instance_type: str
) -> list[NodeDaemon]:
    """The DaemonSets the release of ``chart`` at ``version`` with ``values`` runs on a Trainium
    node of ``instance_type``, with their requests."""
    if chart in CHARTS_WITHOUT_DAEMONSETS:
        read, _ = CHARTS_WITHOUT_DAEMONSETS[chart]
        if version != read:
            raise KeyError(f"{chart} {version}: its templates were read at {read}; read them again")
        return []
    if chart in CHARTS_OFF_TRAINIUM:
        switch, why = CHARTS_OFF_TRAINIUM[chart]
        if lookup(values, switch):
            raise KeyError(f"{chart}: {'.'.join(switch)} is on, but {why} and it has no facts here")
        return []
    facts = chart_facts(chart, version)
    merged = merge_values(facts.defaults, values)
    found = []
    for daemonset in facts.daemonsets:
        if daemonset.enabled_by and not lookup(merged, daemonset.enabled_by):
            continue
        if not daemonset.placement(merged, instance_type):
            continue
        requests = Resources(pods=1)
        for container in daemonset.containers:
            if container.enabled_by is None or lookup(merged, container.enabled_by):
                requests = requests + container.requests(merged)
        found.append(NodeDaemon(daemonset.name, requests, f"{facts.source} ({chart} {version})"))
    return found


def pinned_chart_daemons(pin: AddonPin, values: Mapping[str, Any], instance_type: str) -> list[NodeDaemon]:
    """:func:`chart_daemons` of a pinned chart."""
    return chart_daemons(pin.name, pin.version, values, instance_type)


# ---------------------------------------------------------------------------------------------
# EKS managed add-ons (and kube-proxy, which EKS installs itself): cited facts.

#: EKS add-on name -> its DaemonSets on every node (each tolerates all taints), per node.
ADDON_DAEMONS: dict[str, tuple[NodeDaemon, ...]] = {
    "vpc-cni": (
        NodeDaemon(
            "kube-system/aws-node",
            Resources(25, 0, 1),
            # aws/eks-charts stable/aws-vpc-cni values.yaml (chart 1.22.4): resources.requests
            # cpu 25m; init and nodeAgent (network policy agent) resources {}. The managed add-on
            # build's own manifest may differ (not readable offline).
            "aws/eks-charts stable/aws-vpc-cni values.yaml",
        ),
    ),
    "eks-pod-identity-agent": (
        NodeDaemon(
            "kube-system/eks-pod-identity-agent",
            Resources(0, 0, 1),
            # aws/eks-pod-identity-agent charts/eks-pod-identity-agent values.yaml: resources {},
            # tolerations [{operator: Exists}].
            "aws/eks-pod-identity-agent chart values.yaml",
        ),
    ),
    "eks-node-monitoring-agent": (
        NodeDaemon(
            "kube-system/eks-node-monitoring-agent",
            Resources(10, 30, 1),
            # aws/eks-node-monitoring-agent charts/eks-node-monitoring-agent values.yaml (image
            # v1.7.0-eksbuild.1): requests cpu 10m, memory 30Mi; tolerations [{operator: Exists}].
            "aws/eks-node-monitoring-agent chart values.yaml",
        ),
    ),
    "aws-ebs-csi-driver": (
        NodeDaemon(
            "kube-system/ebs-csi-node",
            Resources(30, 104, 1),
            # kubernetes-sigs/aws-ebs-csi-driver tag v1.62.0, charts/aws-ebs-csi-driver:
            # node.resources 10m/40Mi (ebs-plugin), node-driver-registrar and liveness-probe
            # 10m/32Mi each (templates/_node.tpl defaults), node.tolerateAllTaints true.
            "kubernetes-sigs/aws-ebs-csi-driver v1.62.0 chart",
        ),
    ),
    "amazon-cloudwatch-observability": (
        # aws-observability/helm-charts tag amazon-cloudwatch-observability-6.2.0, values.yaml:
        # root tolerations [{operator: Exists}]; agent (DaemonSet mode) 250m/128Mi;
        # containerLogs.fluentBit 50m/25Mi; neuronMonitor 256m/128Mi on trn1/trn2 types. Its
        # node-exporter needs otelContainerInsights (off), dcgm-exporter GPU types.
        NodeDaemon(
            "amazon-cloudwatch/cloudwatch-agent",
            Resources(250, 128, 1),
            "amazon-cloudwatch-observability 6.2.0",
        ),
        NodeDaemon(
            "amazon-cloudwatch/fluent-bit", Resources(50, 25, 1), "amazon-cloudwatch-observability 6.2.0"
        ),
        NodeDaemon(
            "amazon-cloudwatch/neuron-monitor",
            Resources(256, 128, 1),
            "amazon-cloudwatch-observability 6.2.0",
        ),
    ),
}
#: kube-proxy, which EKS installs on every cluster (self-managed, no add-on resource here):
#: cpu 100m as in EKS's kube-proxy DaemonSet (MEDIUM: seen in EKS manifests; per-node DaemonSet
#: sums recorded on EKS 1.27-1.29 clusters, 2i2c-org/infrastructure daemonset_requests.yaml,
#: are consistent with it). Tolerates all taints.
KUBE_PROXY = NodeDaemon("kube-system/kube-proxy", Resources(100, 0, 1), "EKS kube-proxy DaemonSet")


def addon_daemons(pin: AddonPin) -> tuple[NodeDaemon, ...]:
    """The DaemonSets of a managed add-on pin."""
    return ADDON_DAEMONS[pin.name]


class DaemonSettings(Protocol):
    """The settings that decide which DaemonSets run on a Trainium node (what
    :class:`~trainium_eks.config.PlatformSettings` has; a Protocol so this module does not
    import the configuration, which imports it). ``monitoring_exporters`` counts only with
    ``training_enabled`` (the exporters come with the workload)."""

    @property
    def facts(self) -> InstanceFacts: ...
    @property
    def region(self) -> str: ...
    @property
    def neuron_node_problem_detector(self) -> bool: ...
    @property
    def container_insights(self) -> bool: ...
    @property
    def etcd_enabled(self) -> bool: ...
    @property
    def monitoring_enabled(self) -> bool: ...
    @property
    def monitoring_neuron_monitor(self) -> bool: ...
    @property
    def monitoring_exporters(self) -> bool: ...
    @property
    def training_enabled(self) -> bool: ...
