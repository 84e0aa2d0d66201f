"""The pods each Helm chart and EKS managed add-on the platform installs creates, and how each is
placed (node selector, tolerations) from the values the platform passes: what
tests/stacks/test_trainium_placement.py walks beside the stacks' own manifests.

No chart is rendered here: there is no ``helm`` and no chart archive offline. Each chart's pods,
their switches and their placement are read from its templates at the pinned version (cited per
chart), and its default values are merged with ours by Helm's rule (:func:`merge_values`: maps
merge, ours win, a null deletes). Two simplifications, both of which can
only make a pod land on MORE nodes than it does: node affinity is left out (it only narrows where a
pod lands), and a pod whose chart default tolerations were not read here is taken to tolerate
every taint unless our values give its list. A component the platform leaves off and that is not
modelled is listed in ``off``: turning it on fails the walk until someone reads its template.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: A path into a chart's values.
ValuesPath = tuple[str, ...]
#: A pod that tolerates every taint (``operator: Exists`` with no key).
TOLERATE_ALL: tuple[dict[str, str], ...] = ({"operator": "Exists"},)
_CRITICAL = {"key": "CriticalAddonsOnly", "operator": "Exists"}
_NO_EXECUTE_300 = {"effect": "NoExecute", "operator": "Exists", "tolerationSeconds": 300}
_LINUX = {"kubernetes.io/os": "linux"}


@dataclass(frozen=True)
class PodTemplate:
    """One pod template of a chart and how its template places it.

    Attributes:
        name: the workload's name (for messages).
        kind: Deployment, DaemonSet, StatefulSet (an operator's) or Job.
        enabled: values paths that must all be true for it to be rendered.
        selector: values paths of its node selector; the first non-empty one counts (Volcano's
            ``or``), merged over ``fixed_selector``.
        fixed_selector: labels the template always selects.
        tolerations: values paths of its tolerations; the first non-empty one counts.
        fixed_tolerations: tolerations the template always adds.
        tolerate_all: a values switch that makes the template tolerate every taint instead.
        unread_default: the chart's default tolerations were not read here: without a list in our
            values the pod is taken to tolerate every taint.
    """

    name: str
    kind: str
    enabled: tuple[ValuesPath, ...] = ()
    selector: tuple[ValuesPath, ...] = ()
    fixed_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[ValuesPath, ...] = ()
    fixed_tolerations: tuple[Mapping[str, Any], ...] = ()
    tolerate_all: ValuesPath | None = None
    unread_default: bool = False


@dataclass(frozen=True)
class ChartPods:
    """A chart's pods at the versions read, its default values for them, what must stay off."""

    chart: str
    versions: tuple[str, ...]
    defaults: Mapping[str, Any]
    pods: tuple[PodTemplate, ...]
    source: str
    off: tuple[ValuesPath, ...] = ()


@dataclass(frozen=True)
class PlacedPod:
    """A pod as a scheduler sees it: where it comes from, its kind, selector and tolerations."""

    where: str
    kind: str
    node_selector: dict[str, str]
    tolerations: list[dict[str, Any]]


def merge_values(defaults: Mapping[str, Any], ours: Mapping[str, Any]) -> dict[str, Any]:
    """Helm's merge of user values over a chart's defaults: maps merge, ``None`` deletes a
    default, anything else replaces (helm.sh, "Values Files": coalescing)."""
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


def _first(values: Mapping[str, Any], paths: tuple[ValuesPath, ...]) -> Any:
    return next((found for path in paths if (found := lookup(values, path))), None)


_NEURON_TAINT_EXISTS = {"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoSchedule"}
#: neuron-helm-chart 1.10.0's defaults for its pods (tests/contracts/charts.py ``_NEURON``): the
#: device plugin's tolerations (CriticalAddonsOnly, the Neuron taint, a SageMaker health taint),
#: the problem detector on by default with every NoSchedule/NoExecute taint tolerated, the DRA
#: driver, the scheduler extension and the UltraServer operator off.
_NEURON_DEFAULTS = {
    "devicePlugin": {
        "enabled": True,
        "nodeSelector": {},
        "tolerations": [
            _CRITICAL,
            _NEURON_TAINT_EXISTS,
            {
                "key": "sagemaker.amazonaws.com/node-health-status",
                "operator": "Equal",
                "value": "Unschedulable",
                "effect": "NoSchedule",
            },
        ],
    },
    "npd": {
        "enabled": True,
        "nodeSelector": {},
        "tolerations": [
            {"effect": "NoSchedule", "operator": "Exists"},
            {"effect": "NoExecute", "operator": "Exists"},
        ],
    },
    "draDriver": {"enabled": False, "nodeSelector": {}, "tolerations": [_NEURON_TAINT_EXISTS]},
    "scheduler": {"enabled": False},
    "ultraserverOperator": {"enabled": False},
}


_KARPENTER = "aws/karpenter-provider-aws@v1.14.1:charts/karpenter"
_FSX = "kubernetes-sigs/aws-fsx-csi-driver@helm-chart-aws-fsx-csi-driver-1.17.0:charts/aws-fsx-csi-driver"
_VOLCANO = "volcano-sh/volcano@v1.15.0:installer/helm/chart/volcano"
_KPS = "prometheus-community/helm-charts@kube-prometheus-stack-88.5.3:charts/kube-prometheus-stack"
_SUBCHARTS = (
    "grafana-community/helm-charts@grafana-12.11.1:charts/grafana/values.yaml L127, L438-443, L1541; "
    "prometheus-community/helm-charts@kube-state-metrics-8.4.0:charts/kube-state-metrics/values.yaml "
    "L360, L376; @prometheus-node-exporter-4.56.1:charts/prometheus-node-exporter/values.yaml L464-473"
)


def _volcano(component: str, kind: str, name: str, switch: str) -> PodTemplate:
    custom = "custom"
    return PodTemplate(
        name,
        kind,
        enabled=((custom, switch),),
        selector=((custom, f"{component}_ns"), (custom, "default_ns")),
        tolerations=((custom, f"{component}_tolerations"), (custom, "default_tolerations")),
    )


CHARTS: tuple[ChartPods, ...] = (
    ChartPods(
        "karpenter",
        ("1.14.1",),
        {"nodeSelector": dict(_LINUX), "tolerations": [_CRITICAL]},
        (
            PodTemplate(
                "karpenter", "Deployment", selector=(("nodeSelector",),), tolerations=(("tolerations",),)
            ),
        ),
        f"{_KARPENTER}/values.yaml L90-91, L109-111; templates/deployment.yaml L252-271",
    ),
    ChartPods(
        "karpenter-crd",
        ("1.14.1",),
        {},
        (),
        "aws/karpenter-provider-aws@v1.14.1:charts/karpenter-crd: CRDs only",
    ),
    ChartPods(
        "aws-fsx-csi-driver",
        ("1.17.0",),
        {
            "controller": {"nodeSelector": {}, "tolerations": [_CRITICAL, _NO_EXECUTE_300]},
            "node": {"nodeSelector": {}, "tolerateAllTaints": True, "tolerations": []},
        },
        (
            PodTemplate(
                "fsx-csi-controller",
                "Deployment",
                selector=(("controller", "nodeSelector"),),
                fixed_selector=_LINUX,
                tolerations=(("controller", "tolerations"),),
            ),
            PodTemplate(
                "fsx-csi-node",
                "DaemonSet",
                selector=(("node", "nodeSelector"),),
                fixed_selector=_LINUX,
                tolerations=(("node", "tolerations"),),
                fixed_tolerations=({"key": "fsx.csi.aws.com/agent-not-ready", "operator": "Exists"},),
                tolerate_all=("node", "tolerateAllTaints"),
            ),
        ),
        f"{_FSX}/values.yaml L77, L100-105, L155, L191-192; templates/controller-deployment.yaml L32-42; "
        "templates/node-daemonset.yaml L35-57",
    ),
    ChartPods(
        "aws-efa-k8s-device-plugin",
        ("v0.5.30",),
        {"nodeSelector": {}, "tolerations": []},
        (
            PodTemplate(
                "aws-efa-k8s-device-plugin",
                "DaemonSet",
                selector=(("nodeSelector",),),
                tolerations=(("tolerations",),),
                fixed_tolerations=(_CRITICAL,),
            ),
        ),
        "aws/eks-charts@bfe91c4:stable/aws-efa-k8s-device-plugin/templates/daemonset.yaml L34-48",
    ),
    ChartPods(
        "neuron-helm-chart",
        ("1.10.0",),
        _NEURON_DEFAULTS,
        (
            PodTemplate(
                "neuron-device-plugin",
                "DaemonSet",
                enabled=(("devicePlugin", "enabled"),),
                selector=(("devicePlugin", "nodeSelector"),),
                tolerations=(("devicePlugin", "tolerations"),),
            ),
            PodTemplate(
                "neuron-problem-detector",
                "DaemonSet",
                enabled=(("npd", "enabled"),),
                selector=(("npd", "nodeSelector"),),
                tolerations=(("npd", "tolerations"),),
            ),
            PodTemplate(
                "neuron-dra-driver",
                "DaemonSet",
                enabled=(("draDriver", "enabled"),),
                selector=(("draDriver", "nodeSelector"),),
                tolerations=(("draDriver", "tolerations"),),
            ),
            PodTemplate(
                "neuron-scheduler-extension",
                "Deployment",
                enabled=(("scheduler", "enabled"),),
                selector=(("scheduler", "nodeSelector"),),
                tolerations=(("scheduler", "tolerations"),),
                unread_default=True,
            ),
            PodTemplate(
                "neuron-scheduler",
                "Deployment",
                enabled=(("scheduler", "enabled"),),
                selector=(("scheduler", "customScheduler", "nodeSelector"),),
                unread_default=True,
            ),
        ),
        "neuron-helm-chart 1.10.0 values (helm show values, digest sha256:ed5d8f73): devicePlugin, npd, "
        "draDriver, scheduler.enabled and ultraserverOperator.enabled as _NEURON_DEFAULTS; the scheduler "
        "pods' default tolerations not read",
        off=(("ultraserverOperator", "enabled"),),
    ),
    ChartPods(
        "volcano",
        ("1.15.0",),
        {
            "custom": {
                "admission_enable": True,
                "controller_enable": True,
                "scheduler_enable": True,
                "metrics_enable": False,
                "colocation_enable": False,
                "agent_scheduler_enable": False,
            }
        },
        (
            _volcano("admission", "Job", "volcano-admission-init", "admission_enable"),
            _volcano("admission", "Deployment", "volcano-admission", "admission_enable"),
            _volcano("controller", "Deployment", "volcano-controllers", "controller_enable"),
            _volcano("scheduler", "Deployment", "volcano-scheduler", "scheduler_enable"),
        ),
        f"{_VOLCANO}/values.yaml L25-36, L59, L143-146, L173-176; templates/admission-init.yaml L1-6, L66, L83-87; "
        "templates/admission.yaml L1-6, L116-120; templates/controllers.yaml L1-6, L148-152; "
        "templates/scheduler.yaml L1-6, L176-180",
        off=(
            ("custom", "metrics_enable"),
            ("custom", "colocation_enable"),
            ("custom", "agent_scheduler_enable"),
        ),
    ),
    ChartPods(
        "kube-prometheus-stack",
        ("88.5.3",),
        {
            "alertmanager": {"enabled": True, "alertmanagerSpec": {"nodeSelector": {}, "tolerations": []}},
            "prometheusOperator": {
                "enabled": True,
                "nodeSelector": {},
                "tolerations": [],
                "admissionWebhooks": {
                    "enabled": True,
                    "patch": {"enabled": True, "nodeSelector": {}, "tolerations": []},
                    "deployment": {"enabled": False},
                },
            },
            "prometheus": {"enabled": True, "prometheusSpec": {"nodeSelector": {}, "tolerations": []}},
            "grafana": {
                "enabled": True,
                "nodeSelector": {},
                "tolerations": [],
                "testFramework": {"enabled": True},
                "imageRenderer": {"enabled": False},
            },
            "kubeStateMetrics": {"enabled": True},
            "kube-state-metrics": {"nodeSelector": {}, "tolerations": []},
            "nodeExporter": {"enabled": True},
            "prometheus-node-exporter": {
                "nodeSelector": dict(_LINUX),
                "tolerations": [{"effect": "NoSchedule", "operator": "Exists"}],
            },
            "thanosRuler": {"enabled": False},
            "crds": {"upgradeJob": {"enabled": False}},
            "windowsMonitoring": {"enabled": False},
        },
        (
            PodTemplate(
                "prometheus-operator",
                "Deployment",
                enabled=(("prometheusOperator", "enabled"),),
                selector=(("prometheusOperator", "nodeSelector"),),
                tolerations=(("prometheusOperator", "tolerations"),),
            ),
            *(
                PodTemplate(
                    f"admission {job}",
                    "Job",
                    enabled=(
                        ("prometheusOperator", "enabled"),
                        ("prometheusOperator", "admissionWebhooks", "enabled"),
                        ("prometheusOperator", "admissionWebhooks", "patch", "enabled"),
                    ),
                    selector=(("prometheusOperator", "admissionWebhooks", "patch", "nodeSelector"),),
                    tolerations=(("prometheusOperator", "admissionWebhooks", "patch", "tolerations"),),
                )
                for job in ("create", "patch")
            ),
            PodTemplate(
                "prometheus",
                "StatefulSet",
                enabled=(("prometheus", "enabled"),),
                selector=(("prometheus", "prometheusSpec", "nodeSelector"),),
                tolerations=(("prometheus", "prometheusSpec", "tolerations"),),
            ),
            PodTemplate(
                "alertmanager",
                "StatefulSet",
                enabled=(("alertmanager", "enabled"),),
                selector=(("alertmanager", "alertmanagerSpec", "nodeSelector"),),
                tolerations=(("alertmanager", "alertmanagerSpec", "tolerations"),),
            ),
            PodTemplate(
                "grafana",
                "Deployment",
                enabled=(("grafana", "enabled"),),
                selector=(("grafana", "nodeSelector"),),
                tolerations=(("grafana", "tolerations"),),
            ),
            PodTemplate(
                "kube-state-metrics",
                "Deployment",
                enabled=(("kubeStateMetrics", "enabled"),),
                selector=(("kube-state-metrics", "nodeSelector"),),
                tolerations=(("kube-state-metrics", "tolerations"),),
            ),
            PodTemplate(
                "prometheus-node-exporter",
                "DaemonSet",
                enabled=(("nodeExporter", "enabled"),),
                selector=(("prometheus-node-exporter", "nodeSelector"),),
                tolerations=(("prometheus-node-exporter", "tolerations"),),
            ),
        ),
        f"{_KPS}/values.yaml L40, L369, L402, L1160, L1198, L2680, L2712, L2826, L2875, L2900, L3128, "
        "L3144-3146, L3434-3439, L3615, L4354, L4421, L5307; Chart.yaml L51-69 (the subcharts' conditions); "
        f"templates/prometheus-operator/deployment.yaml, admission-webhooks/job-patch/job-createSecret.yaml "
        f"L1, L58-69, job-patchWebhook.yaml L1, L67-78, prometheus/prometheus.yaml, "
        f"alertmanager/alertmanager.yaml L1, L51-53; {_SUBCHARTS}",
        off=(
            ("thanosRuler", "enabled"),
            ("crds", "upgradeJob", "enabled"),
            ("windowsMonitoring", "enabled"),
            ("prometheusOperator", "admissionWebhooks", "deployment", "enabled"),
            ("grafana", "imageRenderer", "enabled"),
            ("grafana", "testFramework", "enabled"),
        ),
    ),
)

#: EKS managed add-on -> its pods: (name, kind, node selector, tolerations). The DaemonSets
#: tolerate every taint (as trainium_eks.addons.node_daemons.ADDON_DAEMONS cites); the EBS CSI controller
#: as kubernetes-sigs/aws-ebs-csi-driver@v1.62.0:charts/aws-ebs-csi-driver/values.yaml L267, L312
#: and templates/controller.yaml L40-54 place it (the managed add-on is built from that chart;
#: its own manifest is not readable offline).
ADDON_PODS: dict[str, tuple[tuple[str, str, dict[str, str], tuple[dict[str, Any], ...]], ...]] = {
    "vpc-cni": (("aws-node", "DaemonSet", {}, TOLERATE_ALL),),
    "eks-pod-identity-agent": (("eks-pod-identity-agent", "DaemonSet", {}, TOLERATE_ALL),),
    "eks-node-monitoring-agent": (("eks-node-monitoring-agent", "DaemonSet", {}, TOLERATE_ALL),),
    "aws-ebs-csi-driver": (
        ("ebs-csi-node", "DaemonSet", {}, TOLERATE_ALL),
        ("ebs-csi-controller", "Deployment", dict(_LINUX), (_CRITICAL, _NO_EXECUTE_300)),
    ),
}


def chart_pods(where: str, chart: str, version: str, values: Mapping[str, Any]) -> list[PlacedPod]:
    """The pods the release of ``chart`` at ``version`` with ``values`` creates, placed.

    Raises:
        KeyError: a chart or version not read here, or a component of it turned on that is not
            modelled.
    """
    found = [c for c in CHARTS if c.chart == chart and version in c.versions]
    if not found:
        raise KeyError(
            f"{chart} {version}: its pods are not modelled; read its templates (tests/contracts/chart_pods.py)"
        )
    model = found[0]
    merged = merge_values(model.defaults, values)
    for switch in model.off:
        if lookup(merged, switch):
            raise KeyError(
                f"{chart}: {'.'.join(switch)} is on, but its pods are not modelled ({model.source})"
            )
    placed = []
    for pod in model.pods:
        if not all(lookup(merged, path) for path in pod.enabled):
            continue
        selector = {**pod.fixed_selector, **(_first(merged, pod.selector) or {})}
        given = _first(merged, pod.tolerations)
        if pod.tolerate_all and lookup(merged, pod.tolerate_all):
            tolerations = list(TOLERATE_ALL)
        elif given is None and pod.unread_default:
            tolerations = list(TOLERATE_ALL)
        else:
            tolerations = [*pod.fixed_tolerations, *(given or [])]
        placed.append(PlacedPod(f"{where} / {chart} {pod.kind} {pod.name}", pod.kind, selector, tolerations))
    return placed


def addon_pods(where: str, addon: str) -> list[PlacedPod]:
    """The pods of an EKS managed add-on; KeyError for one not modelled."""
    if addon not in ADDON_PODS:
        raise KeyError(
            f"add-on {addon}: its pods are not modelled (tests/contracts/chart_pods.py ADDON_PODS)"
        )
    return [
        PlacedPod(
            f"{where} / add-on {addon} {kind} {name}", kind, dict(selector), [dict(t) for t in tolerations]
        )
        for name, kind, selector, tolerations in ADDON_PODS[addon]
    ]
