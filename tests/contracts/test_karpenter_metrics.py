"""Karpenter's metrics as the platform reads them: the capacity alert counts the series and the
reason Karpenter 1.14.1 writes, names only EC2 errors Karpenter counts as insufficient capacity,
and the chart's ServiceMonitor is labelled for the platform's Prometheus and keeps what it reads."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.contracts import karpenter_metrics as km
from tests.contracts.model import Contract
from trainium_eks.monitoring import karpenter_capacity as karpenter
from trainium_eks.monitoring.catalog import CATALOG
from trainium_eks.monitoring.names import RELEASE
from trainium_eks.monitoring.rules import CAPACITY_WINDOW_MINUTES, alerts
from trainium_eks.monitoring.stack_values import stack_values
from trainium_eks.nodes.node_pool import NODE_POOL_NAME

CAPACITY = karpenter.KarpenterCapacity(NODE_POOL_NAME, "trn2.48xlarge", "use1-az6")
TABLES = [
    km.NODECLAIMS_DISRUPTED_LABELS,
    km.DISRUPTION_REASONS,
    km.INSUFFICIENT_CAPACITY_CODES,
    km.INSTANCE_TYPE_GAUGES,
    km.CHART_SERVICE_MONITOR,
]


def _capacity_alert():
    (alert,) = [
        a
        for a in alerts(training_namespace="training", karpenter_capacity=CAPACITY)
        if a.name == "TrainiumCapacityMissing"
    ]
    return alert


def _paths(values: dict[str, Any], contract: Contract, prefix: str = "") -> set[str]:
    """Dotted paths of ``values``, down to a key the contract lists (a map or list is whole)."""
    paths: set[str] = set()
    for key, value in values.items():
        path = f"{prefix}{key}"
        if contract.get(path) is None and isinstance(value, dict):
            paths |= _paths(value, contract, f"{path}.")
        else:
            paths.add(path)
    return paths


@pytest.mark.parametrize("table", TABLES, ids=lambda t: t.consumer)
def test_given_a_karpenter_table_then_each_entry_says_its_use_and_cites_it(table: Contract):
    assert table.consumer and table.version == km.VERSION and table.entries
    for entry in table.entries:
        assert len(entry.use) > 10 and len(entry.source) > 15, entry.name


def test_given_the_capacity_alert_then_it_counts_karpenters_insufficient_capacity_series():
    assert karpenter.NODECLAIMS_DISRUPTED == km.NODECLAIMS_DISRUPTED_TOTAL
    assert karpenter.INSUFFICIENT_CAPACITY_REASON == km.INSUFFICIENT_CAPACITY_REASON
    assert km.DISRUPTION_REASONS.get(km.INSUFFICIENT_CAPACITY_REASON) is not None
    assert karpenter.BUILD_INFO == km.BUILD_INFO
    expr = _capacity_alert().expr
    selectors = re.findall(rf"{km.NODECLAIMS_DISRUPTED_TOTAL}\{{([^}}]*)\}}", expr)
    assert selectors
    labels = {e.name for e in km.NODECLAIMS_DISRUPTED_LABELS.entries}
    for selector in selectors:
        matchers = dict(re.findall(r'(\w+)="([^"]*)"', selector))
        assert set(matchers) <= labels
        assert matchers == {"reason": km.INSUFFICIENT_CAPACITY_REASON, "nodepool": NODE_POOL_NAME}


def test_given_the_capacity_alert_then_the_error_codes_it_names_are_ones_karpenter_counts():
    alert = _capacity_alert()
    text = f"{alert.summary} {alert.runbook}"
    named = set(re.findall(r"\b[A-Z][a-z]+(?:[A-Z][a-z]+)+\b", text)) - {"TrainiumCapacityMissing"}
    codes = {e.name for e in km.INSUFFICIENT_CAPACITY_CODES.entries}
    # Karpenter's event reason is no EC2 code.
    ec2_named = named - {km.INSUFFICIENT_CAPACITY_EVENT_REASON}
    assert ec2_named == {"InsufficientInstanceCapacity", "VcpuLimitExceeded"}
    assert ec2_named <= codes
    assert ec2_named & km.QUOTA_CODES == {"VcpuLimitExceeded"}
    assert f"reason={km.INSUFFICIENT_CAPACITY_EVENT_REASON}" in alert.runbook


def test_given_the_window_then_it_spans_several_of_karpenters_retries():
    # A failed offering is retried once its unavailability expires: the count rises every few
    # minutes while the gang waits, and the alert stays on between two failures.
    assert CAPACITY_WINDOW_MINUTES * 60 >= 3 * km.UNAVAILABLE_OFFERING_TTL_S
    assert f"[{CAPACITY_WINDOW_MINUTES}m]" in _capacity_alert().expr


def test_given_the_chart_fragment_then_it_sets_only_the_charts_service_monitor_keys():
    values = karpenter.karpenter_chart_monitoring_values()
    assert _paths(values, km.CHART_SERVICE_MONITOR) <= km.CHART_SERVICE_MONITOR.settable()
    assert values["serviceMonitor"]["enabled"] is True


def test_given_the_chart_fragment_then_the_platforms_prometheus_selects_its_service_monitor():
    monitor = karpenter.karpenter_chart_monitoring_values()["serviceMonitor"]
    assert monitor["additionalLabels"] == {km.PROMETHEUS_SERVICE_MONITOR_SELECTOR_KEY: RELEASE}
    spec = stack_values(storage_class_name="gp3", volume_gib=50, retention_days=30)["prometheus"][
        "prometheusSpec"
    ]
    # The chart's defaults stand: release label, every namespace (kube-system included).
    for path in km.PROMETHEUS_SELECTOR_VALUES:
        assert path.rsplit(".", 1)[-1] not in spec, path
    # No target relabeling into Karpenter's own "node" label.
    targets = {r.get("targetLabel") for r in monitor.get("relabelings", [])}
    assert km.OWN_NODE_LABEL not in targets


def test_given_the_metric_relabeling_then_it_drops_the_instance_type_gauges_and_keeps_what_is_read():
    (rule,) = karpenter.karpenter_chart_monitoring_values()["serviceMonitor"]["metricRelabelings"]
    assert rule["action"] == "drop" and rule["sourceLabels"] == ["__name__"]
    pattern = re.compile(rule["regex"])  # Prometheus anchors relabel regexes at both ends
    assert all(pattern.fullmatch(e.name) for e in km.INSTANCE_TYPE_GAUGES.entries)
    read = {km.NODECLAIMS_DISRUPTED_TOTAL, km.BUILD_INFO} | set(CATALOG)
    assert not [name for name in read if pattern.fullmatch(name)]
    assert {km.NODECLAIMS_DISRUPTED_TOTAL, km.BUILD_INFO} <= set(CATALOG)


def test_given_the_nodegroup_capacity_then_no_capacity_alert():
    assert "TrainiumCapacityMissing" not in {a.name for a in alerts(training_namespace="training")}
