"""Launch template: EFA interfaces per instance type, placement group, IMDSv2, encrypted root."""

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk.assertions import Template

from tests.support import resources
from trainium_eks.nodes.launch_template import TrainiumLaunchTemplate
from trainium_job.errors import ConfigError
from trainium_job.instances import INSTANCE_FACTS, instance_facts


def _synth(instance_type: str, **kwargs) -> dict:
    app = cdk.App()
    stack = cdk.Stack(app, "Lt")
    vpc = ec2.Vpc(
        stack,
        "Vpc",
        max_azs=1,
        nat_gateways=0,
        subnet_configuration=[ec2.SubnetConfiguration(name="p", subnet_type=ec2.SubnetType.PRIVATE_ISOLATED)],
    )
    TrainiumLaunchTemplate(
        stack,
        "Lt",
        facts=instance_facts(instance_type),
        vpc=vpc,
        cluster_security_group_id="sg-cluster",
        **kwargs,
    )
    return Template.from_stack(stack).to_json()


def _data(template: dict) -> dict:
    (lt,) = resources(template, "AWS::EC2::LaunchTemplate").values()
    return lt["Properties"]["LaunchTemplateData"]


@pytest.mark.parametrize(
    "instance_type,cards", [("trn1.32xlarge", 8), ("trn1n.32xlarge", 16), ("trn2.48xlarge", 16)]
)
def test_given_multi_node_type_when_efa_layout_then_one_efa_per_card_device_0_then_1(instance_type, cards):
    nics = _data(_synth(instance_type))["NetworkInterfaces"]
    assert [n["NetworkCardIndex"] for n in nics] == list(range(cards))
    assert [n["DeviceIndex"] for n in nics] == [0] + [1] * (cards - 1)
    assert {n["InterfaceType"] for n in nics} == {"efa"}
    assert cards == INSTANCE_FACTS[instance_type].efa_interfaces


def test_given_efa_only_layout_then_ena_primary_and_efa_only_on_every_card():
    nics = _data(_synth("trn1.32xlarge", efa_layout="efa-only"))["NetworkInterfaces"]
    layout = [(n["NetworkCardIndex"], n["DeviceIndex"], n["InterfaceType"]) for n in nics]
    assert layout == [(0, 0, "interface"), (0, 1, "efa-only")] + [(c, 0, "efa-only") for c in range(1, 8)]


def test_given_any_layout_then_every_interface_carries_cluster_and_efa_groups():
    template = _synth("trn1.32xlarge")
    (efa_sg_id,) = resources(template, "AWS::EC2::SecurityGroup")
    for nic in _data(template)["NetworkInterfaces"]:
        assert nic["Groups"] == ["sg-cluster", {"Fn::GetAtt": [efa_sg_id, "GroupId"]}]
        assert nic["DeleteOnTermination"] is True


def test_given_efa_group_then_it_allows_all_traffic_only_to_and_from_itself():
    template = _synth("trn1.32xlarge")
    (sg_id,) = resources(template, "AWS::EC2::SecurityGroup")
    (ingress,) = resources(template, "AWS::EC2::SecurityGroupIngress").values()
    (egress,) = resources(template, "AWS::EC2::SecurityGroupEgress").values()
    for rule, peer_key in (
        (ingress["Properties"], "SourceSecurityGroupId"),
        (egress["Properties"], "DestinationSecurityGroupId"),
    ):
        assert rule["IpProtocol"] == "-1"
        assert rule[peer_key] == {"Fn::GetAtt": [sg_id, "GroupId"]}
    sg = template["Resources"][sg_id]["Properties"]
    assert "SecurityGroupIngress" not in sg
    # allow_all_outbound=False renders CDK's placeholder egress rule that matches nothing.
    assert all(rule.get("CidrIp") != "0.0.0.0/0" for rule in sg.get("SecurityGroupEgress", []))


def test_given_defaults_then_cluster_placement_imdsv2_encrypted_gp3_and_no_ssh_key():
    template = _synth("trn1.32xlarge", root_volume_gib=600)
    data = _data(template)
    ((pg_id, pg),) = resources(template, "AWS::EC2::PlacementGroup").items()
    assert pg["Properties"]["Strategy"] == "cluster"
    assert data["Placement"] == {"GroupName": {"Fn::GetAtt": [pg_id, "GroupName"]}}
    assert data["MetadataOptions"] == {
        "HttpTokens": "required",
        "HttpEndpoint": "enabled",
        "HttpPutResponseHopLimit": 1,
    }
    assert data["BlockDeviceMappings"] == [
        {
            "DeviceName": "/dev/xvda",
            "Ebs": {"VolumeSize": 600, "VolumeType": "gp3", "Encrypted": True, "DeleteOnTermination": True},
        }
    ]
    assert data["InstanceType"] == "trn1.32xlarge"
    assert "KeyName" not in data
    assert "CapacityReservationSpecification" not in data


def test_given_capacity_block_then_market_type_and_reservation_are_targeted():
    data = _data(_synth("trn1.32xlarge", capacity_reservation_id="cr-0123456789abcdef0", capacity_block=True))
    assert data["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    assert data["CapacityReservationSpecification"] == {
        "CapacityReservationTarget": {"CapacityReservationId": "cr-0123456789abcdef0"}
    }


def test_given_single_node_type_then_one_plain_interface():
    nics = _data(_synth("trn1.2xlarge"))["NetworkInterfaces"]
    assert [(n["NetworkCardIndex"], n["DeviceIndex"], n.get("InterfaceType")) for n in nics] == [(0, 0, None)]


def test_given_capacity_block_without_reservation_then_construct_refuses():
    with pytest.raises(ConfigError, match="'capacity_block' = True is invalid: a Capacity Block needs"):
        _synth("trn1.32xlarge", capacity_block=True)


@pytest.mark.parametrize(
    "props,field,fix",
    [
        ({"root_volume_gib": 10}, "root_volume_gib", "use 30 to 16384"),
        ({"root_volume_gib": 20000}, "root_volume_gib", "use 30 to 16384"),
        ({"root_volume_gib": 512.5}, "root_volume_gib", "whole number"),
        ({"efa_layout": "ena"}, "efa_layout", "choose one of efa, efa-only"),
        ({"capacity_reservation_id": "cr-123"}, "capacity_reservation_id", "cr-0123456789abcdef0"),
        ({"imds_hop_limit": 3}, "imds_hop_limit", "use 1 or 2"),
    ],
)
def test_given_a_bad_prop_when_constructed_directly_then_config_error_names_the_prop(props, field, fix):
    with pytest.raises(ConfigError) as err:
        _synth("trn1.32xlarge", **props)
    assert err.value.field_name == field and fix in str(err.value)


def test_given_a_bad_efa_layout_on_a_single_node_type_then_still_refused():
    # The layout is checked even where it shapes nothing (trn1.2xlarge has no EFA).
    with pytest.raises(ConfigError, match="'efa_layout' = 'ena'"):
        _synth("trn1.2xlarge", efa_layout="ena")


def test_given_a_token_root_volume_then_the_check_waits_for_deploy_time():
    app = cdk.App()
    stack = cdk.Stack(app, "Lt")
    size = cdk.CfnParameter(stack, "RootGiB", type="Number").value_as_number
    vpc = ec2.Vpc(stack, "Vpc", max_azs=1, nat_gateways=0, subnet_configuration=[])
    TrainiumLaunchTemplate(
        stack,
        "Lt",
        facts=instance_facts("trn1.32xlarge"),
        vpc=vpc,
        cluster_security_group_id="sg-1",
        root_volume_gib=size,
    )
    (lt,) = resources(Template.from_stack(stack).to_json(), "AWS::EC2::LaunchTemplate").values()
    assert lt["Properties"]["LaunchTemplateData"]["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"] == {
        "Ref": "RootGiB"
    }
