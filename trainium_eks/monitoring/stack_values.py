"""Helm values of kube-prometheus-stack: what the platform changes from the chart's defaults, and why.

Every key is one of the pinned chart's (kube-prometheus-stack 88.5.3 ``values.yaml``, and its
subcharts' for ``grafana``, ``kube-state-metrics`` and ``prometheus-node-exporter``); a test
checks each against a table of the charts' keys. Helm replaces lists, so a list given here is the
whole list.

* Everything but node-exporter runs on the system nodes with explicit requests (the chart sets
  none); node-exporter runs on every node (its default toleration of every ``NoSchedule`` taint
  covers the Neuron taint) with requests the Trainium node budget counts.
* Prometheus keeps its data on an encrypted gp3 volume (the EBS CSI driver's StorageClass).
  Retention is bounded by time and by size, the size below the volume (:func:`retention_size_gib`).
* Grafana: ClusterIP only (port-forward, like TensorBoard); no admin password in the values, so
  the Grafana chart generates a random one into its own Secret and reuses it on upgrades
  (grafana-12.11.1 templates/secret.yaml and ``grafana.password`` in _helpers.tpl L131-137:
  ``lookup`` of the existing Secret, else ``randAlphaNum 40``). ``lookup`` reads the cluster
  because the CDK's Helm handler runs ``helm upgrade --install`` against it, not ``helm template``.
  No persistence: its dashboards and datasource are provisioned, nothing else needs to survive.
* Alertmanager is off unless asked for: with no receiver configured it delivers nothing, while
  Prometheus evaluates the rules either way and shows what fires (its Alerts page, the ``ALERTS``
  series, Grafana's alert list).
* The control-plane scrapes that EKS does not expose (controller manager, scheduler, etcd) and
  kube-proxy's are off, so their default alerts do not fire for targets that cannot be reached:
  EKS's kube-proxy serves metrics on ``127.0.0.1:10249`` and its add-on resets an edited
  ``metricsBindAddress`` (aws/containers-roadmap issue 657). The chart's ``TargetDown`` is
  replaced by one that leaves out the training pods (``trainium_eks.monitoring.rules``): their
  endpoint exists only while the training script runs, not while a pod waits for data or
  precompiles.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainium_job.scheduling import INSTANCE_TYPE_LABEL, NODE_POOL_LABEL_KEY, SYSTEM_NODE_LABEL

from .names import PROMETHEUS_SERVICE_ACCOUNT, node_relabeling

#: Container requests/limits the chart leaves unset. Prometheus's working set grows with the active
#: series (the head block); ~35,000 series for 2 Trainium + 2 system nodes fit in far less than
#: the request.
RESOURCES: dict[str, dict[str, dict[str, str]]] = {
    "prometheus": {"requests": {"cpu": "200m", "memory": "1Gi"}, "limits": {"memory": "3Gi"}},
    "grafana": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}},
    "grafana-sidecar": {"requests": {"cpu": "20m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
    "operator": {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
    "kube-state-metrics": {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
    "alertmanager": {"requests": {"cpu": "20m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
    #: Per node, on the Trainium nodes too (their pod budget counts it).
    "node-exporter": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
}
#: Share of the Prometheus volume its size-based retention may fill. Prometheus recommends "at
#: most, 80-85% of your allocated Prometheus disk space", the rest covering in-progress
#: compactions, and counts the WAL and head chunks in the size without deleting them
#: (prometheus/prometheus v3.14.0 docs/storage.md L97-103, L141-152).
RETENTION_SHARE = 0.8


def retention_size_gib(volume_gib: int) -> int:
    """The size-based retention for a volume: :data:`RETENTION_SHARE` of it, whole GiB."""
    return int(volume_gib * RETENTION_SHARE)


def _resources(name: str) -> dict[str, dict[str, str]]:
    return {kind: dict(values) for kind, values in RESOURCES[name].items()}


def stack_values(
    *,
    storage_class_name: str,
    volume_gib: int,
    retention_days: int,
    grafana: bool = True,
    alertmanager: bool = False,
    remote_write: dict[str, Any] | None = None,
    node_selector: Mapping[str, str] = SYSTEM_NODE_LABEL,
) -> dict[str, Any]:
    """The release's values. ``remote_write``: one Prometheus ``remoteWrite`` entry (AMP), or None;
    ``node_selector``: the labels of the system nodes everything but node-exporter runs on."""
    system = dict(node_selector)
    prometheus_spec: dict[str, Any] = {
        "nodeSelector": system,
        "resources": _resources("prometheus"),
        "retention": f"{retention_days}d",
        "retentionSize": f"{retention_size_gib(volume_gib)}GiB",
        "storageSpec": {
            "volumeClaimTemplate": {
                "spec": {
                    "storageClassName": storage_class_name,
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": f"{volume_gib}Gi"}},
                }
            }
        },
    }
    if remote_write is not None:
        prometheus_spec["remoteWrite"] = [remote_write]
    return {
        "crds": {"enabled": True},
        "defaultRules": {"disabled": {"TargetDown": True}},
        "kubeControllerManager": {"enabled": False},
        "kubeScheduler": {"enabled": False},
        "kubeEtcd": {"enabled": False},
        "kubeProxy": {"enabled": False},
        "alertmanager": {
            "enabled": alertmanager,
            "alertmanagerSpec": {"nodeSelector": system, "resources": _resources("alertmanager")},
        },
        "grafana": {
            "enabled": grafana,
            "nodeSelector": system,
            "resources": _resources("grafana"),
            "persistence": {"enabled": False},
            # The chart's `helm test` pod: nothing runs it here.
            "testFramework": {"enabled": False},
            "sidecar": {
                "resources": _resources("grafana-sidecar"),
                "datasources": {"alertmanager": {"enabled": alertmanager}},
            },
        },
        "kube-state-metrics": {
            "nodeSelector": system,
            "resources": _resources("kube-state-metrics"),
            # kube_node_labels then carries the node pool and instance type (label_trainium_eks_pool,
            # label_node_kubernetes_io_instance_type): the dashboard and the alerts pick Trainium nodes by it.
            "metricLabelsAllowlist": [f"nodes=[{NODE_POOL_LABEL_KEY},{INSTANCE_TYPE_LABEL}]"],
        },
        "prometheus-node-exporter": {
            "resources": _resources("node-exporter"),
            "prometheus": {"monitor": {"relabelings": [node_relabeling()]}},
        },
        "prometheusOperator": {
            "nodeSelector": system,
            "resources": _resources("operator"),
            "admissionWebhooks": {"patch": {"nodeSelector": system}},
        },
        "prometheus": {
            "serviceAccount": {"create": True, "name": PROMETHEUS_SERVICE_ACCOUNT},
            "prometheusSpec": prometheus_spec,
        },
    }
