"""EFA device plugin chart: pinned, only on Trainium nodes of an EFA instance type."""

import aws_cdk as cdk
import pytest
from aws_cdk import aws_eks_v2 as eks

from tests.support import helm_charts, synth_platform
from tests.trainium_eks.addons import chart, depends_on, nodegroup_id
from trainium_eks.addons.efa import EfaDevicePlugin
from trainium_job.errors import ConfigError
from trainium_job.instances import instance_facts


def test_given_default_config_then_the_pinned_eks_chart_is_installed_in_kube_system(platform_json):
    _, props = chart(platform_json, "efa")
    assert props["Repository"] == "https://aws.github.io/eks-charts"
    assert props["Chart"] == "aws-efa-k8s-device-plugin"
    assert props["Version"] == "v0.5.30"
    assert props["Namespace"] == "kube-system"


def test_given_default_config_then_plugin_is_selected_onto_trainium_nodes_and_tolerates_them(platform_json):
    values = chart(platform_json, "efa")[1]["Values"]
    assert values["nodeSelector"] == {
        "trainium-eks/pool": "trainium",
        "node.kubernetes.io/instance-type": "trn1.32xlarge",
    }
    assert values["tolerations"] == [
        {"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoSchedule"},
        # The node health check's pending taint: the interfaces are registered when it passes.
        {"key": "trainium-eks/node-health", "operator": "Equal", "value": "pending", "effect": "NoSchedule"},
    ]


def test_given_the_nodegroup_mode_then_chart_waits_for_the_trainium_nodegroup(nodegroup_platform_json):
    logical_id, _ = chart(nodegroup_platform_json, "efa")
    assert nodegroup_id(nodegroup_platform_json, "trainium") in depends_on(
        nodegroup_platform_json, logical_id
    )


def test_given_trn1n_then_selector_names_that_instance_type():
    template = synth_platform(instance_type="trn1n.32xlarge")
    assert chart(template, "efa")[1]["Values"]["nodeSelector"]["node.kubernetes.io/instance-type"] == (
        "trn1n.32xlarge"
    )


def test_given_an_instance_type_without_efa_then_no_efa_plugin_is_installed():
    template = synth_platform(instance_type="trn1.2xlarge", min_nodes="1", desired_nodes="1", max_nodes="1")
    releases = {p["Release"] for p in helm_charts(template).values()}
    assert "efa" not in releases
    assert "neuron" in releases


def test_given_facts_without_efa_when_constructed_directly_then_it_refuses():
    stack = cdk.Stack(cdk.App(), "Direct")
    cluster = eks.Cluster.from_cluster_attributes(stack, "C", cluster_name="c")
    with pytest.raises(ConfigError, match="trn1.2xlarge has no EFA"):
        EfaDevicePlugin(stack, "Efa", cluster=cluster, facts=instance_facts("trn1.2xlarge"))
