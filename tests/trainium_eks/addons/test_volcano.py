"""Volcano chart on the system nodes, and the training Queue sized to the Trainium nodegroup."""

import aws_cdk as cdk
import pytest

from stacks import TrainiumPlatformStack
from tests.support import synth_platform
from tests.trainium_eks.addons import chart, depends_on, nodegroup_id, objects
from trainium_eks.addons.volcano import queue_capability
from trainium_eks.config import PlatformConfig
from trainium_job.errors import ConfigError
from trainium_job.instances import instance_facts

SYSTEM = {"trainium-eks/pool": "system"}


def _queue(template):
    (found,) = objects(template, "Queue")
    return found


def test_given_default_config_then_the_pinned_chart_is_installed_and_awaited(platform_json):
    _, props = chart(platform_json, "volcano")
    assert props["Repository"] == "https://volcano-sh.github.io/helm-charts"
    assert props["Chart"] == "volcano"
    assert props["Version"] == "1.15.0"
    assert props["Namespace"] == "volcano-system"
    assert "CreateNamespace" not in props  # the namespace is ours, with Pod Security labels
    assert props["Wait"] is True
    assert props["Timeout"] == "600s"  # within the kubectl handler's 15-minute limit


def test_given_default_config_then_every_volcano_component_is_on_the_system_nodegroup(platform_json):
    custom = chart(platform_json, "volcano")[1]["Values"]["custom"]
    for key in ("default_ns", "admission_ns", "controller_ns", "scheduler_ns"):
        assert custom[key] == SYSTEM, key


def test_given_default_config_then_chart_waits_for_system_nodes_and_queue_for_the_chart(platform_json):
    chart_id, _ = chart(platform_json, "volcano")
    assert nodegroup_id(platform_json, "system") in depends_on(platform_json, chart_id)
    queue_id, _ = _queue(platform_json)
    assert chart_id in depends_on(platform_json, queue_id)


def test_given_default_config_then_training_queue_holds_two_full_trn1_nodes(platform_json):
    _, queue = _queue(platform_json)
    assert queue["apiVersion"] == "scheduling.volcano.sh/v1beta1"
    assert queue["metadata"]["name"] == "training"
    assert "namespace" not in queue["metadata"]  # Queues are cluster-scoped
    assert queue["spec"]["reclaimable"] is False
    assert queue["spec"]["weight"] == 1
    assert queue["spec"]["capability"] == {
        "cpu": "256",
        "memory": "1024Gi",
        "aws.amazon.com/neuron": "32",
        "aws.amazon.com/neuroncore": "64",
        "vpc.amazonaws.com/efa": "16",
    }


def test_given_trn1n_with_four_nodes_max_then_capability_follows_the_maximum_size():
    template = synth_platform(instance_type="trn1n.32xlarge", max_nodes="4")
    assert _queue(template)[1]["spec"]["capability"] == {
        "cpu": "512",
        "memory": "2048Gi",
        "aws.amazon.com/neuron": "64",
        "aws.amazon.com/neuroncore": "128",
        "vpc.amazonaws.com/efa": "64",
    }


@pytest.mark.parametrize(
    "instance_type, max_nodes, expected",
    [
        (
            "trn2.48xlarge",
            3,
            {
                "cpu": "576",
                "memory": "6144Gi",
                "aws.amazon.com/neuron": "48",
                "aws.amazon.com/neuroncore": "192",
                "vpc.amazonaws.com/efa": "48",
            },
        ),
        # No EFA on trn1.2xlarge: no EFA entry rather than a zero.
        (
            "trn1.2xlarge",
            1,
            {"cpu": "8", "memory": "32Gi", "aws.amazon.com/neuron": "1", "aws.amazon.com/neuroncore": "2"},
        ),
    ],
)
def test_given_instance_type_and_max_nodes_then_capability_is_per_node_facts_times_nodes(
    instance_type, max_nodes, expected
):
    assert queue_capability(instance_facts(instance_type), max_nodes) == expected


def test_given_zero_nodes_then_capability_is_refused():
    with pytest.raises(ConfigError, match="'max_nodes' = 0 is invalid"):
        queue_capability(instance_facts("trn1.32xlarge"), 0)


def test_given_default_config_then_stack_exposes_the_queue_name():
    stack = TrainiumPlatformStack(cdk.App(), "Attrs", config=PlatformConfig())
    assert stack.platform.addons.queue_name == "training"
    assert stack.platform.addons.volcano.queue_name == "training"
