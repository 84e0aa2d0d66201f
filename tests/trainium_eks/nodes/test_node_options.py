"""The options a Trainium node has whichever construct launches it: defaults and checks, once."""

import dataclasses
import inspect

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2

from trainium_eks import TrainiumNodeOptions as PackageTrainiumNodeOptions
from trainium_eks.nodes import TrainiumNodeOptions as NodesTrainiumNodeOptions
from trainium_eks.nodes.node_options import TrainiumNodeOptions
from trainium_eks.nodes.node_pool import TrainiumNodePool
from trainium_eks.nodes.nodegroup import TrainiumNodegroup
from trainium_job.errors import ConfigError
from trainium_job.instances import instance_facts
from trainium_job.naming import DEFAULT_NAME_PREFIX

TRN1 = instance_facts("trn1.32xlarge")


def _subnet() -> ec2.ISubnet:
    stack = cdk.Stack(cdk.App(), "S")
    return ec2.Subnet.from_subnet_attributes(stack, "Subnet", subnet_id="subnet-0123", availability_zone="a")


def test_given_only_the_instance_type_and_subnet_then_the_documented_defaults_apply():
    # Given options of a trn1.32xlarge in one subnet, nothing else
    subnet = _subnet()
    options = TrainiumNodeOptions(facts=TRN1, subnet=subnet)
    # Then every other field is its documented default
    assert (options.facts, options.subnet) == (TRN1, subnet)
    assert options.release_version is None and options.kubernetes_version is None
    assert options.root_volume_gib == 512
    assert options.efa_layout == "efa"
    assert options.fast_image_pull is True
    assert options.capacity_reservation_id is None
    assert options.capacity_block is False
    assert options.name_prefix == DEFAULT_NAME_PREFIX
    assert options.health_check is False


def test_given_options_then_they_are_frozen_and_keyword_only():
    options = TrainiumNodeOptions(facts=TRN1, subnet=_subnet())
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.root_volume_gib = 30  # type: ignore[misc]
    with pytest.raises(TypeError):
        TrainiumNodeOptions(TRN1, _subnet())  # type: ignore[call-arg]


@pytest.mark.parametrize(
    "props,field,fix",
    [
        ({"root_volume_gib": 10}, "root_volume_gib", "use 30 to 16384"),
        ({"root_volume_gib": 20000}, "root_volume_gib", "use 30 to 16384"),
        ({"efa_layout": "ena"}, "efa_layout", "efa"),
        ({"capacity_reservation_id": "cr-1"}, "capacity_reservation_id", "cr-"),
        ({"capacity_block": True}, "capacity_block", "needs capacity_reservation_id"),
    ],
)
def test_given_a_bad_launch_option_then_building_the_options_names_the_field(props, field, fix):
    # When options are built with one bad launch setting, then the error names it and the fix
    with pytest.raises(ConfigError, match=rf"config '{field}' = .*{fix}"):
        TrainiumNodeOptions(facts=TRN1, subnet=_subnet(), **props)


def test_given_a_capacity_block_with_its_reservation_then_the_options_are_accepted():
    options = TrainiumNodeOptions(
        facts=TRN1, subnet=_subnet(), capacity_block=True, capacity_reservation_id="cr-0123456789abcdef0"
    )
    assert options.capacity_block


def test_given_the_two_constructs_then_both_take_the_options_and_none_of_its_fields_again():
    # The nodegroup and the node pool take the shared options, not their fields one by one
    fields = {field.name for field in dataclasses.fields(TrainiumNodeOptions)}
    for construct in (TrainiumNodegroup, TrainiumNodePool):
        parameters = set(inspect.signature(construct.__init__).parameters)
        assert "options" in parameters, construct
        assert not fields & parameters, (construct, fields & parameters)
    # And it is exported where the constructs are
    assert PackageTrainiumNodeOptions is NodesTrainiumNodeOptions is TrainiumNodeOptions
