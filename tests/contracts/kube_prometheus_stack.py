"""The Helm values keys kube-prometheus-stack (and the subcharts it bundles) read at the pinned versions.

Facts read from each chart's ``values.yaml`` at its tag (key path -> line), not derived from our
code; :data:`OPAQUE` keys take free-form values (a node selector, resource lists, a volume claim
template, relabel configs) whose content the chart passes through. A key the platform sets that
is not here fails the test: look it up in the chart at the pinned version and add it with its line.

* ``kube-prometheus-stack`` 88.5.3: prometheus-community/helm-charts tag kube-prometheus-stack-88.5.3
  (ea930bae), charts/kube-prometheus-stack/values.yaml;
* ``grafana`` 12.11.1 (its dependency): grafana-community/helm-charts tag grafana-12.11.1 (864f7794),
  charts/grafana/values.yaml;
* ``kube-state-metrics`` 8.4.0: prometheus-community/helm-charts tag kube-state-metrics-8.4.0
  (1982f1c5), charts/kube-state-metrics/values.yaml;
* ``prometheus-node-exporter`` 4.56.1: tag prometheus-node-exporter-4.56.1 (8b8e639c),
  charts/prometheus-node-exporter/values.yaml.

Keys under a subchart's name (``grafana.``, ``kube-state-metrics.``, ``prometheus-node-exporter.``)
are the subchart's own unless the parent declares them (``grafana.enabled``, ``grafana.sidecar.datasources``).
"""

from __future__ import annotations

from tests.contracts.model import Contract, Entry

CHART_VERSIONS = {
    "kube-prometheus-stack": "88.5.3",
    "grafana": "12.11.1",
    "kube-state-metrics": "8.4.0",
    "prometheus-node-exporter": "4.56.1",
}
KEYS: dict[str, dict[str, int]] = {
    "kube-prometheus-stack": {
        "crds.enabled": 34,
        "defaultRules.disabled": 322,
        "alertmanager.enabled": 402,
        "alertmanager.alertmanagerSpec.nodeSelector": 1160,
        "alertmanager.alertmanagerSpec.resources": 1165,
        "grafana.enabled": 1378,
        "grafana.sidecar.datasources.alertmanager.enabled": 1607,
        "kubeControllerManager.enabled": 2025,
        "kubeEtcd.enabled": 2326,
        "kubeScheduler.enabled": 2440,
        "kubeProxy.enabled": 2579,
        "prometheus-node-exporter.prometheus.monitor.relabelings": 2800,
        "prometheusOperator.admissionWebhooks.patch.nodeSelector": 3144,
        "prometheusOperator.resources": 3412,
        "prometheusOperator.nodeSelector": 3434,
        "prometheus.serviceAccount.create": 3660,
        "prometheus.serviceAccount.name": 3661,
        "prometheus.prometheusSpec.nodeSelector": 4421,
        "prometheus.prometheusSpec.retention": 4567,
        "prometheus.prometheusSpec.retentionSize": 4571,
        "prometheus.prometheusSpec.remoteWrite": 4658,
        "prometheus.prometheusSpec.resources": 4668,
        "prometheus.prometheusSpec.storageSpec": 4675,
    },
    "grafana": {
        "testFramework.enabled": 127,
        "resources": 427,
        "nodeSelector": 438,
        "persistence.enabled": 491,
        "sidecar.resources": 1048,
    },
    "kube-state-metrics": {"nodeSelector": 360, "metricLabelsAllowlist": 416, "resources": 515},
    "prometheus-node-exporter": {"resources": 334},
}
#: Keys whose value is free-form (the charts pass it through to a Kubernetes or operator field).
OPAQUE = frozenset(
    {
        "nodeSelector",
        "resources",
        "storageSpec",
        "remoteWrite",
        "relabelings",
        "disabled",
        "metricLabelsAllowlist",
    }
)
SUBCHARTS = ("grafana", "kube-state-metrics", "prometheus-node-exporter")


def declared(path: str) -> str | None:
    """The chart that declares ``path`` (dotted), or None."""
    if path in KEYS["kube-prometheus-stack"]:
        return "kube-prometheus-stack"
    head, _, rest = path.partition(".")
    if head in SUBCHARTS and rest in KEYS[head]:
        return head
    return None


def _source(chart: str, line: int) -> str:
    tags = {
        "kube-prometheus-stack": "prometheus-community/helm-charts@kube-prometheus-stack-88.5.3",
        "grafana": "grafana-community/helm-charts@grafana-12.11.1",
        "kube-state-metrics": "prometheus-community/helm-charts@kube-state-metrics-8.4.0",
        "prometheus-node-exporter": "prometheus-community/helm-charts@prometheus-node-exporter-4.56.1",
    }
    return f"{tags[chart]}:charts/{chart}/values.yaml:{line}"


#: The table as a consumer contract (tests/contracts/charts.py registers it): a subchart's keys
#: under its name; an :data:`OPAQUE` key is a ``map`` (its content is passed through).
KUBE_PROMETHEUS_STACK = Contract(
    consumer="kube-prometheus-stack chart (with its grafana, kube-state-metrics, node-exporter subcharts)",
    version=CHART_VERSIONS["kube-prometheus-stack"],
    entries=tuple(
        Entry(
            path if chart == "kube-prometheus-stack" else f"{chart}.{path}",
            "a values key of the chart",
            _source(chart, line),
            kind="map" if path.rsplit(".", 1)[-1] in OPAQUE else "value",
        )
        for chart, keys in KEYS.items()
        for path, line in keys.items()
    ),
)
