"""The Trainium nodegroup in the default synth: Neuron AMI, launch template, one AZ, taint."""

from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Match

from tests.support import NODEGROUP, resources, synth_platform
from tests.trainium_eks.jobs.training_support import bare_cluster
from trainium_eks.config import config_from_context
from trainium_eks.nodes.node_options import TrainiumNodeOptions
from trainium_eks.nodes.nodegroup import SIZE_PROPS, TrainiumNodegroup
from trainium_eks.versions import (
    DEFAULT_KUBERNETES_VERSION,
    KUBERNETES_RELEASES,
    NEURON_AMI_RELEASES,
    default_neuron_ami_release,
    neuron_ami_release,
)
from trainium_job.errors import ConfigError
from trainium_job.instances import instance_facts
from trainium_job.neuron_stack import NEURON_STACK


def _trainium_nodegroup(platform_json):
    (ng,) = [
        r
        for r in resources(platform_json, "AWS::EKS::Nodegroup").values()
        if r["Properties"]["Labels"].get("trainium-eks/pool") == "trainium"
    ]
    return ng["Properties"]


def test_given_the_nodegroup_mode_when_synthesized_then_nodegroup_uses_the_neuron_ami(
    nodegroup_platform_json,
):
    props = _trainium_nodegroup(nodegroup_platform_json)
    assert props["AmiType"] == "AL2023_x86_64_NEURON"
    # The instance type lives in the launch template, not on the nodegroup.
    assert "InstanceTypes" not in props
    assert props["CapacityType"] == "ON_DEMAND"


def test_given_the_nodegroup_mode_then_two_nodes_with_auto_repair(nodegroup_platform_json):
    props = _trainium_nodegroup(nodegroup_platform_json)
    assert props["ScalingConfig"] == {"MinSize": 2, "DesiredSize": 2, "MaxSize": 2}
    assert props["NodeRepairConfig"] == {"Enabled": True}


def test_given_the_nodegroup_mode_then_nodes_are_tainted_for_training_only(nodegroup_platform_template):
    nodegroup_platform_template.has_resource_properties(
        "AWS::EKS::Nodegroup",
        {
            "AmiType": "AL2023_x86_64_NEURON",
            # The Trainium taint, and the node health check's until the node passes it.
            "Taints": [
                {"Key": "aws.amazon.com/neuron", "Value": "true", "Effect": "NO_SCHEDULE"},
                {"Key": "trainium-eks/node-health", "Value": "pending", "Effect": "NO_SCHEDULE"},
            ],
            "LaunchTemplate": {
                "Id": {"Ref": Match.string_like_regexp("TrainiumLaunchTemplate")},
                "Version": Match.any_value(),
            },
        },
    )


def test_given_the_nodegroup_mode_then_nodegroup_uses_only_the_trainium_az_subnet(nodegroup_platform_json):
    props = _trainium_nodegroup(nodegroup_platform_json)
    (subnet_ref,) = props["Subnets"]
    subnet = nodegroup_platform_json["Resources"][subnet_ref["Ref"]]["Properties"]
    assert subnet["AvailabilityZoneId"] == "usw2-az4"
    assert subnet["MapPublicIpOnLaunch"] is False


def _nodegroup(instance_type: str = "trn1.32xlarge", **props: Any) -> TrainiumNodegroup:
    """A nodegroup on a bare cluster: the sizes go to the construct, the rest to its options."""
    cluster = bare_cluster()
    sizes = {name: props.pop(name) for name in SIZE_PROPS if name in props}
    options = TrainiumNodeOptions(
        facts=instance_facts(instance_type), subnet=cluster.vpc.private_subnets[0], **props
    )
    return TrainiumNodegroup(cdk.Stack.of(cluster), "Trn", cluster=cluster, options=options, **sizes)


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
        ("trn1.32xlarge", {"release_version": "1.36"}, "release_version", "such as 1.36.2-20260625"),
        (
            "trn1.32xlarge",
            {"release_version": "1.36.2-20260714"},
            "release_version",
            "Neuron driver 2.29.0.0",
        ),
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


def test_given_the_nodegroup_mode_then_the_nodes_are_pinned_to_an_ami_whose_driver_runs_the_image(
    nodegroup_platform_json,
):
    release = _trainium_nodegroup(nodegroup_platform_json)["ReleaseVersion"]
    assert release == default_neuron_ami_release(DEFAULT_KUBERNETES_VERSION)
    assert release.startswith(f"{DEFAULT_KUBERNETES_VERSION}.")
    known = neuron_ami_release(release)
    assert known is not None and NEURON_STACK.supports_driver(known.neuron_driver)


def test_given_kubernetes_1_35_then_its_own_ami_release_is_pinned():
    (ng,) = [
        r["Properties"]
        for r in resources(
            synth_platform(**NODEGROUP, kubernetes_version="1.35"), "AWS::EKS::Nodegroup"
        ).values()
        if r["Properties"]["Labels"].get("trainium-eks/pool") == "trainium"
    ]
    # amazon-eks-ami CHANGELOG v20260625: AL2023_x86_64_NEURON 1.35.6-20260625, aws-neuronx-dkms 2.28.0.0.
    assert ng["ReleaseVersion"] == "1.35.6-20260625"


def test_given_every_kubernetes_version_then_its_default_ami_is_the_newest_known_with_a_supported_driver():
    for version in KUBERNETES_RELEASES:
        default = default_neuron_ami_release(version)
        newer = NEURON_AMI_RELEASES[: NEURON_AMI_RELEASES.index(neuron_ami_release(default))]
        # Every newer release of that version carries a driver the image's runtime cannot use.
        assert all(
            not NEURON_STACK.supports_driver(r.neuron_driver) for r in newer if version in r.release_versions
        )
        assert default == "{}-20260625".format(
            {"1.34": "1.34.9", "1.35": "1.35.6", "1.36": "1.36.2"}[version]
        )


@pytest.mark.parametrize(
    ("context", "fix"),
    [
        (
            {"trainium_ami_release_version": "1.36.2-20260714"},
            "does not run the training image's Neuron runtime",
        ),
        (
            {"trainium_ami_release_version": "1.35.6-20260625"},
            "is a Kubernetes 1.35 release; the cluster runs 1.36",
        ),
        ({"trainium_ami_release_version": "latest"}, "give an EKS AMI release version"),
    ],
)
def test_given_a_bad_ami_release_then_one_config_error_naming_the_key(context, fix):
    context = {**context, "kubernetes_version": "1.36"}
    with pytest.raises(ConfigError) as err:
        config_from_context(context)
    assert err.value.field_name == "trainium_ami_release_version" and fix in str(err.value)


def test_given_an_unknown_ami_release_then_accepted_and_the_review_warns():
    from trainium_eks.report.review import platform_review

    config = config_from_context(
        {"kubernetes_version": "1.36", "trainium_ami_release_version": "1.36.3-20261001"}
    )
    assert config.ami_release_version == "1.36.3-20261001"
    assert (
        "warning: trainium_ami_release_version 1.36.3-20261001 is not in NEURON_AMI_RELEASES"
        in platform_review(config)
    )
