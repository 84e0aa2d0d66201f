"""The Trainium nodegroup in the default synth: Neuron AMI, launch template, one AZ, taint."""

from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Match

from tests.support import resources
from tests.trainium_eks.training_support import bare_cluster
from trainium_eks.config import config_from_context
from trainium_eks.instance_types import instance_facts
from trainium_eks.nodegroup import TrainiumNodegroup
from trainium_job.errors import ConfigError


def _trainium_nodegroup(platform_json):
    (ng,) = [
        r
        for r in resources(platform_json, "AWS::EKS::Nodegroup").values()
        if r["Properties"]["Labels"].get("trainium-eks/pool") == "trainium"
    ]
    return ng["Properties"]


def test_given_default_config_when_synthesized_then_nodegroup_uses_the_neuron_ami(platform_json):
    props = _trainium_nodegroup(platform_json)
    assert props["AmiType"] == "AL2023_x86_64_NEURON"
    # The instance type lives in the launch template, not on the nodegroup.
    assert "InstanceTypes" not in props
    assert props["CapacityType"] == "ON_DEMAND"


def test_given_default_config_then_two_nodes_with_auto_repair(platform_json):
    props = _trainium_nodegroup(platform_json)
    assert props["ScalingConfig"] == {"MinSize": 2, "DesiredSize": 2, "MaxSize": 2}
    assert props["NodeRepairConfig"] == {"Enabled": True}


def test_given_default_config_then_nodes_are_tainted_for_training_only(platform_template):
    platform_template.has_resource_properties(
        "AWS::EKS::Nodegroup",
        {
            "AmiType": "AL2023_x86_64_NEURON",
            "Taints": [{"Key": "aws.amazon.com/neuron", "Value": "true", "Effect": "NO_SCHEDULE"}],
            "LaunchTemplate": {
                "Id": {"Ref": Match.string_like_regexp("TrainiumLaunchTemplate")},
                "Version": Match.any_value(),
            },
        },
    )


def test_given_default_config_then_nodegroup_uses_only_the_trainium_az_subnet(platform_json):
    props = _trainium_nodegroup(platform_json)
    (subnet_ref,) = props["Subnets"]
    subnet = platform_json["Resources"][subnet_ref["Ref"]]["Properties"]
    assert subnet["AvailabilityZoneId"] == "usw2-az4"
    assert subnet["MapPublicIpOnLaunch"] is False


def _nodegroup(instance_type: str = "trn1.32xlarge", **props: Any) -> TrainiumNodegroup:
    cluster = bare_cluster()
    return TrainiumNodegroup(
        cdk.Stack.of(cluster),
        "Trn",
        cluster=cluster,
        facts=instance_facts(instance_type),
        subnet=cluster.vpc.private_subnets[0],
        **props,
    )


@pytest.mark.parametrize(
    "instance_type,props,field,fix",
    [
        ("trn1.32xlarge", {"min_size": 3, "max_size": 2}, "min_size", "must not exceed max_size (2)"),
        ("trn1.32xlarge", {"desired_size": 5}, "desired_size", "between min_size (2) and max_size (2)"),
        ("trn1.32xlarge", {"min_size": 0, "desired_size": 0, "max_size": 0}, "max_size", "at least 1"),
        ("trn1.32xlarge", {"min_size": "2"}, "min_size", "whole number"),
        ("trn1.2xlarge", {}, "max_size", "trn1.2xlarge has no EFA for multi-node training"),
        # The launch template's props are checked by the launch template, under the same names.
        ("trn1.32xlarge", {"root_volume_gib": 10}, "root_volume_gib", "use 30 to 16384"),
        ("trn1.32xlarge", {"capacity_block": True}, "capacity_block", "needs capacity_reservation_id"),
    ],
)
def test_given_a_bad_prop_when_a_library_user_builds_the_nodegroup_then_config_error_names_it(
    instance_type, props, field, fix
):
    with pytest.raises(ConfigError) as err:
        _nodegroup(instance_type, **props)
    assert err.value.field_name == field and fix in str(err.value)


def test_given_zero_desired_nodes_when_built_directly_then_the_nodegroup_may_scale_to_zero():
    # Only the app's configuration needs a node for its training job.
    ng = _nodegroup(min_size=0, desired_size=0, max_size=2)
    assert ng.facts.name == "trn1.32xlarge"


def test_given_the_same_bad_sizes_then_config_and_construct_give_one_message_under_their_names():
    with pytest.raises(ConfigError) as from_config:
        config_from_context({"min_nodes": "3", "max_nodes": "2", "desired_nodes": "2"})
    with pytest.raises(ConfigError) as from_construct:
        _nodegroup(min_size=3, max_size=2)
    assert from_config.value.fix == "must not exceed max_nodes (2)"
    assert from_construct.value.fix == "must not exceed max_size (2)"
