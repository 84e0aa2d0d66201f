"""Network: subnets pinned by AZ ID, NAT, flow logs, the S3 gateway endpoint, and the
existing-VPC option."""

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Match, Template

from tests.support import NODEGROUP, k8s_manifests, resources, synth_platform
from trainium_eks.network.vpc import TrainiumNetwork
from trainium_job.errors import ConfigError


def test_given_default_config_then_public_and_private_subnet_in_each_az_id(platform_json):
    subnets = [s["Properties"] for s in resources(platform_json, "AWS::EC2::Subnet").values()]
    assert sorted((s["AvailabilityZoneId"], s["CidrBlock"]) for s in subnets) == [
        ("usw2-az3", "10.0.1.0/24"),
        ("usw2-az3", "10.0.128.0/18"),
        ("usw2-az4", "10.0.0.0/24"),
        ("usw2-az4", "10.0.64.0/18"),
    ]
    # AZ IDs replace AZ names: no lookup at synth, same physical zone in every account.
    assert all("AvailabilityZone" not in s and s["MapPublicIpOnLaunch"] is False for s in subnets)


def test_given_default_config_then_one_nat_gateway_and_vpc_flow_logs(platform_json):
    assert len(resources(platform_json, "AWS::EC2::NatGateway")) == 1
    (flow_log,) = resources(platform_json, "AWS::EC2::FlowLog").values()
    assert flow_log["Properties"]["TrafficType"] == "ALL"
    assert flow_log["Properties"]["ResourceType"] == "VPC"


def _route_tables_of(template_json, subnet_type):
    """Logical IDs of the route tables associated with the created VPC's subnets of a type
    (aws-cdk-lib's ``aws-cdk:subnet-type`` tag: Public or Private)."""
    subnets = {
        logical_id
        for logical_id, subnet in resources(template_json, "AWS::EC2::Subnet").items()
        if {"Key": "aws-cdk:subnet-type", "Value": subnet_type} in subnet["Properties"]["Tags"]
    }
    return {
        a["Properties"]["RouteTableId"]["Ref"]
        for a in resources(template_json, "AWS::EC2::SubnetRouteTableAssociation").values()
        if a["Properties"]["SubnetId"]["Ref"] in subnets
    }


def test_given_default_config_then_an_s3_gateway_endpoint_serves_the_private_subnets(
    platform_template, platform_json
):
    # Amazon VPC User Guide, "Gateway endpoints for Amazon S3": the service is
    # com.amazonaws.<region>.s3, of type Gateway, added as a route to the route tables given.
    private, public = _route_tables_of(platform_json, "Private"), _route_tables_of(platform_json, "Public")
    assert len(private) == 2 and len(public) == 2
    platform_template.resource_count_is("AWS::EC2::VPCEndpoint", 1)
    platform_template.has_resource_properties(
        "AWS::EC2::VPCEndpoint",
        {
            "VpcEndpointType": "Gateway",
            "ServiceName": {"Fn::Join": ["", ["com.amazonaws.", {"Ref": "AWS::Region"}, ".s3"]]},
            "VpcId": {"Ref": Match.string_like_regexp("^NetworkVpc")},
            "RouteTableIds": Match.array_with([{"Ref": table} for table in sorted(private)]),
            # The default endpoint policy (full access): the nodes reach buckets of any account.
            "PolicyDocument": Match.absent(),
        },
    )
    # Only the private subnets' tables: the nodes live there; the public ones hold the NAT only.
    (endpoint,) = resources(platform_json, "AWS::EC2::VPCEndpoint").values()
    assert {t["Ref"] for t in endpoint["Properties"]["RouteTableIds"]} == private


def test_given_default_config_then_stack_is_region_pinned_without_account(default_synth):
    manifest = (default_synth.outdir / "manifest.json").read_text()
    assert '"environment": "aws://unknown-account/us-west-2"' in manifest


def test_given_existing_vpc_when_synthesized_then_no_vpc_is_created_and_its_subnets_are_used():
    template = synth_platform(
        **NODEGROUP,
        existing_vpc_id="vpc-0123456789abcdef0",
        existing_private_subnet_ids="subnet-0aaaaaaaaaaaaaaaa,subnet-0bbbbbbbbbbbbbbbb",
    )
    assert resources(template, "AWS::EC2::VPC") == {}
    # Its route tables are its owner's (and take one S3 endpoint route each): none is added.
    Template.from_json(template).resource_count_is("AWS::EC2::VPCEndpoint", 0)
    (trainium,) = [
        n
        for n in resources(template, "AWS::EKS::Nodegroup").values()
        if n["Properties"]["AmiType"] == "AL2023_x86_64_NEURON"
    ]
    assert trainium["Properties"]["Subnets"] == ["subnet-0aaaaaaaaaaaaaaaa"]
    (cluster,) = resources(template, "AWS::EKS::Cluster").values()
    assert cluster["Properties"]["ResourcesVpcConfig"]["SubnetIds"] == [
        "subnet-0aaaaaaaaaaaaaaaa",
        "subnet-0bbbbbbbbbbbbbbbb",
    ]


def test_given_existing_vpc_with_the_default_karpenter_then_every_node_class_uses_its_first_subnet():
    template = synth_platform(
        existing_vpc_id="vpc-0123456789abcdef0",
        existing_private_subnet_ids="subnet-0aaaaaaaaaaaaaaaa,subnet-0bbbbbbbbbbbbbbbb",
    )
    assert resources(template, "AWS::EC2::VPC") == {}
    classes = {
        o["metadata"]["name"]: o["spec"] for _, o in k8s_manifests(template) if o["kind"] == "EC2NodeClass"
    }
    assert {name: spec["subnetSelectorTerms"] for name, spec in classes.items()} == {
        "trainium": [{"id": "subnet-0aaaaaaaaaaaaaaaa"}],
        "dataset": [{"id": "subnet-0aaaaaaaaaaaaaaaa"}],
        "preparation": [{"id": "subnet-0aaaaaaaaaaaaaaaa"}],
    }


def test_given_created_vpc_then_vpc_and_trainium_subnet_outlive_a_stack_delete(platform_json):
    # FSx (retained) keeps network interfaces in the Trainium subnet: deleting it would fail.
    (vpc,) = resources(platform_json, "AWS::EC2::VPC").values()
    assert vpc["DeletionPolicy"] == "Retain" and vpc["UpdateReplacePolicy"] == "Retain"
    retained = [
        s["Properties"]["AvailabilityZoneId"] + " " + s["Properties"]["CidrBlock"]
        for s in resources(platform_json, "AWS::EC2::Subnet").values()
        if s.get("DeletionPolicy") == "Retain"
    ]
    assert retained == ["usw2-az4 10.0.64.0/18"]


def test_given_default_config_then_flow_logs_are_kms_encrypted_with_a_rotating_retained_key(platform_json):
    (flow_log,) = resources(platform_json, "AWS::EC2::FlowLog").values()
    log_group = platform_json["Resources"][flow_log["Properties"]["LogGroupName"]["Ref"]]
    key_id = log_group["Properties"]["KmsKeyId"]["Fn::GetAtt"][0]
    key = platform_json["Resources"][key_id]
    assert key["Properties"]["EnableKeyRotation"] is True and key["DeletionPolicy"] == "Retain"
    principals = [s["Principal"] for s in key["Properties"]["KeyPolicy"]["Statement"]]
    assert {"Service": "logs.us-west-2.amazonaws.com"} in principals


@pytest.mark.parametrize(
    "props,field,fix",
    [
        ({"cidr": "10.0.0.0/24"}, "cidr", "do not fit"),
        ({"cidr": "fd00::/56"}, "cidr", "IPv4"),
        ({"nat_gateways": 3}, "nat_gateways", "use 1 or 2"),
        (
            {"existing_vpc_id": "vpc-123", "existing_private_subnet_ids": ["subnet-0123456789abcdef0"] * 2},
            "existing_vpc_id",
            "VPC id",
        ),
        (
            {"existing_vpc_id": "vpc-0123456789abcdef0"},
            "existing_private_subnet_ids",
            "two private subnet ids",
        ),
        (
            {"existing_private_subnet_ids": ["subnet-0123456789abcdef0"]},
            "existing_private_subnet_ids",
            "only used together with existing_vpc_id",
        ),
    ],
)
def test_given_a_bad_prop_when_a_library_user_builds_the_network_then_config_error_names_it(
    props, field, fix
):
    stack = cdk.Stack(cdk.App(), "Net", env=cdk.Environment(region="us-west-2"))
    with pytest.raises(ConfigError) as err:
        TrainiumNetwork(stack, "Network", az_ids=("usw2-az4", "usw2-az3"), **props)
    assert err.value.field_name == field and fix in str(err.value)
