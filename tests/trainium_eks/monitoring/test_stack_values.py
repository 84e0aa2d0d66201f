"""kube-prometheus-stack as synthesized: pinned, every values key one of the charts', and set as the
platform needs (system nodes, gp3 storage, retention under the volume, no password in the values)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.contracts.check import check_chart_values
from tests.contracts.kube_prometheus_stack import CHART_VERSIONS
from tests.trainium_eks.addons import chart
from trainium_eks.monitoring.stack_values import RETENTION_SHARE, retention_size_gib, stack_values

SYSTEM = {"trainium-eks/pool": "system"}


def _values(template) -> dict[str, Any]:
    return chart(template, "kube-prometheus-stack")[1]["Values"]


def test_given_default_config_then_the_pinned_chart_is_released_under_its_own_name(platform_json):
    _, props = chart(platform_json, "kube-prometheus-stack")
    assert props["Repository"] == "https://prometheus-community.github.io/helm-charts"
    assert props["Chart"] == "kube-prometheus-stack"
    assert props["Version"] == CHART_VERSIONS["kube-prometheus-stack"]
    assert props["Release"] == "kube-prometheus-stack"  # the label its Prometheus selects by
    assert props["Namespace"] == "monitoring"
    assert "CreateNamespace" not in props  # ours, with Pod Security labels
    assert props["Wait"] is True


def test_given_a_misspelled_key_then_the_check_finds_it():
    values = stack_values(storage_class_name="gp3", volume_gib=50, retention_days=30)
    values["prometheus"]["prometheusSpec"]["retentionSizes"] = "1GiB"
    assert check_chart_values("kube-prometheus-stack", values) == [
        "chart kube-prometheus-stack 88.5.3: values key 'prometheus.prometheusSpec.retentionSizes' "
        "is not one the chart reads"
    ]


def test_given_default_config_then_everything_but_node_exporter_runs_on_system_nodes_with_requests(
    platform_json,
):
    values = _values(platform_json)
    for part in (
        values["prometheus"]["prometheusSpec"],
        values["grafana"],
        values["kube-state-metrics"],
        values["prometheusOperator"],
    ):
        assert part["nodeSelector"] == SYSTEM
        assert part["resources"]["requests"]["cpu"] and part["resources"]["requests"]["memory"]
    assert values["prometheusOperator"]["admissionWebhooks"]["patch"]["nodeSelector"] == SYSTEM
    # node-exporter keeps the chart's toleration of every NoSchedule taint: it runs on Trainium nodes too.
    assert "nodeSelector" not in values["prometheus-node-exporter"]
    assert values["prometheus-node-exporter"]["resources"]["requests"] == {"cpu": "50m", "memory": "64Mi"}


def test_given_default_config_then_prometheus_keeps_30_days_on_an_encrypted_gp3_volume(platform_json):
    spec = _values(platform_json)["prometheus"]["prometheusSpec"]
    claim = spec["storageSpec"]["volumeClaimTemplate"]["spec"]
    assert claim["storageClassName"] == "gp3-encrypted"
    assert claim["resources"]["requests"]["storage"] == "50Gi"
    assert spec["retention"] == "30d"
    assert spec["retentionSize"] == "40GiB"  # 80% of the volume (Prometheus storage docs)
    assert "remoteWrite" not in spec


@pytest.mark.parametrize("volume_gib", [10, 50, 333, 16384])
def test_given_a_volume_then_retention_by_size_stays_within_the_recommended_share(volume_gib):
    assert 0 < retention_size_gib(volume_gib) <= RETENTION_SHARE * volume_gib <= 0.85 * volume_gib


def test_given_default_config_then_grafana_is_cluster_internal_with_a_generated_password(platform_json):
    grafana = _values(platform_json)["grafana"]
    assert grafana["enabled"] is True
    # No adminPassword and no existingSecret: the chart generates one into its Secret.
    assert "adminPassword" not in grafana and "admin" not in grafana
    assert "service" not in grafana  # the chart's ClusterIP
    assert grafana["persistence"] == {"enabled": False}
    assert "password" not in str(platform_json).lower().replace("admin-password", "")


def test_given_default_config_then_alertmanager_and_unreachable_control_plane_scrapes_are_off(platform_json):
    values = _values(platform_json)
    assert values["alertmanager"]["enabled"] is False
    assert values["grafana"]["sidecar"]["datasources"]["alertmanager"] == {"enabled": False}
    for component in ("kubeControllerManager", "kubeScheduler", "kubeEtcd", "kubeProxy"):
        assert values[component] == {"enabled": False}
    assert values["defaultRules"] == {"disabled": {"TargetDown": True}}


def test_given_default_config_then_node_series_carry_the_node_and_nodes_their_pool(platform_json):
    values = _values(platform_json)
    (relabel,) = values["prometheus-node-exporter"]["prometheus"]["monitor"]["relabelings"]
    assert relabel == {
        "sourceLabels": ["__meta_kubernetes_pod_node_name"],
        "targetLabel": "node",
        "action": "replace",
    }
    assert values["kube-state-metrics"]["metricLabelsAllowlist"] == [
        "nodes=[trainium-eks/pool,node.kubernetes.io/instance-type]"
    ]
