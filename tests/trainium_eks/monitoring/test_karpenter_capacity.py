"""Karpenter's metrics in the platform's monitoring: the construct adds the capacity alert only when
given the NodePool Karpenter launches, and the chart fragment turns on a ServiceMonitor the
platform's Prometheus selects (its facts: tests/contracts/test_karpenter_metrics.py)."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks

from tests.support import k8s_manifests
from trainium_eks.addons.monitoring import PlatformMonitoring
from trainium_eks.monitoring import KarpenterCapacity, karpenter_chart_monitoring_values
from trainium_eks.monitoring.names import RELEASE_LABEL
from trainium_eks.nodes.node_pool import NODE_POOL_NAME

CAPACITY = KarpenterCapacity(NODE_POOL_NAME, "trn1.32xlarge", "usw2-az4")


def _alert_names(karpenter_capacity: KarpenterCapacity | None) -> set[str]:
    app = cdk.App()
    stack = cdk.Stack(app, "Monitoring")
    cluster = eks.Cluster.from_cluster_attributes(
        stack,
        "Cluster",
        cluster_name="c",
        kubectl_provider=eks.KubectlProvider.from_kubectl_provider_attributes(
            stack, "Kubectl", service_token="arn:aws:lambda:us-west-2:111122223333:function:kubectl"
        ),
    )
    PlatformMonitoring(
        stack, "Monitoring", cluster=cluster, storage_class_name="gp3", karpenter_capacity=karpenter_capacity
    )
    template = app.synth().get_stack_by_name("Monitoring").template
    (rule,) = [o for _, o in k8s_manifests(template) if o["kind"] == "PrometheusRule"]
    return {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]}


def test_given_karpenter_capacity_then_the_deployed_rule_has_the_capacity_alert_and_not_otherwise():
    with_karpenter = _alert_names(CAPACITY)
    assert with_karpenter - _alert_names(None) == {"TrainiumCapacityMissing"}


def test_given_the_chart_fragment_then_its_service_monitor_carries_the_release_label():
    values = karpenter_chart_monitoring_values()
    assert values["serviceMonitor"]["enabled"] is True
    assert values["serviceMonitor"]["additionalLabels"] == RELEASE_LABEL
    # A copy: merging or editing the chart's values cannot change the shared constant.
    assert values["serviceMonitor"]["additionalLabels"] is not RELEASE_LABEL
