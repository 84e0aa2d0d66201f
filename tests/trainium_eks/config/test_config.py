"""Configuration: defaults, overrides from context, and one clear error per bad input."""

import json

import pytest

from trainium_eks.cluster.eks_cluster import check_admin_principal_arns
from trainium_eks.config import PlatformConfig, az_id_prefix, config_from_context
from trainium_job.errors import ConfigError


def test_given_no_context_when_loaded_then_defaults_are_the_reference_platform():
    config = config_from_context({})
    assert config == PlatformConfig()
    assert (config.instance_type, config.desired_nodes, config.kubernetes_version) == (
        "trn1.32xlarge",
        2,
        "1.35",
    )
    assert config.facts.neuron_cores == 32


def test_given_string_context_values_when_loaded_then_they_are_coerced_to_field_types():
    config = config_from_context(
        {
            "instance_type": "trn1n.32xlarge",
            "max_nodes": "4",
            "endpoint_public_cidrs": "203.0.113.7/32, 198.51.100.0/24",
            "admin_principal_arns": '["arn:aws:iam::123456789012:role/Admin"]',
            "tags": '{"team": "ml"}',
            "capacity_reservation_id": "none",
        }
    )
    assert config.max_nodes == 4
    assert config.endpoint_public_cidrs == ("203.0.113.7/32", "198.51.100.0/24")
    assert config.admin_principal_arns == ("arn:aws:iam::123456789012:role/Admin",)
    assert config.tags == {"team": "ml"}
    assert config.capacity_reservation_id is None


def test_given_cdk_own_context_keys_when_loaded_then_they_are_ignored():
    config = config_from_context(
        {
            "@aws-cdk/core:newStyleStackSynthesis": True,
            "aws:cdk:enable-path-metadata": True,
            "availability-zones:account=1:region=us-west-2": ["a"],
        }
    )
    assert config == PlatformConfig()


def test_given_region_codes_then_az_id_prefix_is_derived():
    assert az_id_prefix("us-west-2") == "usw2"
    assert az_id_prefix("us-east-1") == "use1"
    assert az_id_prefix("ap-northeast-1") == "apne1"
    assert az_id_prefix("eu-central-1") == "euc1"
    assert az_id_prefix("us-gov-west-1") == "usgw1"
    assert az_id_prefix("us-gov-east-1") == "usge1"
    assert az_id_prefix("cn-northwest-1") == "cnnw1"
    assert az_id_prefix("us-iso-east-1") is None


@pytest.mark.parametrize("region,az_ids", [("us-east-1", ("use1-az6", "use1-az5"))])
def test_given_another_region_with_its_az_ids_when_loaded_then_accepted(region, az_ids):
    config = config_from_context({"region": region, "trainium_az_id": az_ids[0], "second_az_id": az_ids[1]})
    assert (config.region, config.trainium_az_id) == (region, az_ids[0])


def test_given_a_region_of_another_partition_then_its_az_ids_pass_and_the_offering_decides():
    # GovCloud's AZ-ID scheme is accepted; the refusal is that the offline offering table lists no
    # Trainium there (trainium_job/instances.py TRAINIUM_OFFERINGS).
    context = {"region": "us-gov-west-1", "trainium_az_id": "usgw1-az1", "second_az_id": "usgw1-az2"}
    with pytest.raises(ConfigError, match=r"config 'region' = 'us-gov-west-1' .*no Trainium instance type"):
        config_from_context(context)
    with pytest.raises(ConfigError, match=r"partition aws-us-gov"):
        check_admin_principal_arns(["arn:aws:iam::123456789012:role/Admin"], region="us-gov-west-1")


def test_given_broad_endpoint_with_opt_in_when_loaded_then_accepted():
    config = config_from_context(
        {"endpoint_public_cidrs": "0.0.0.0/1,128.0.0.0/1", "endpoint_public_allow_broad": "true"}
    )
    assert config.endpoint_public_allow_broad is True


def test_given_49_valid_tags_when_loaded_then_accepted():
    tags = {f"team:{i}": "ml @ a/b=c+d-e_f.g" for i in range(49)}
    assert len(config_from_context({"tags": json.dumps(tags)}).tags) == 49


BAD_INPUTS = [
    ({"instance_type": "trn3.96xlarge"}, "instance_type", "choose one of"),
    ({"trainium_az_id": "us-west-2d"}, "trainium_az_id", "AZ name"),
    ({"trainium_az_id": "use1-az6"}, "trainium_az_id", "start with 'usw2-'"),
    ({"second_az_id": "usw2-az4"}, "second_az_id", "must differ"),
    ({"min_nodes": "3", "max_nodes": "2"}, "min_nodes", "must not exceed max_nodes"),
    ({"desired_nodes": "0", "min_nodes": "0"}, "desired_nodes", "at least 1"),
    ({"desired_nodes": "5"}, "desired_nodes", "between min_nodes"),
    ({"max_nodes": "0", "min_nodes": "0", "desired_nodes": "0"}, "max_nodes", "at least 1"),
    ({"max_nodes": "two"}, "max_nodes", "whole number"),
    ({"instance_type": "trn1.2xlarge"}, "max_nodes", "no EFA for multi-node"),
    ({"kubernetes_version": "1.29"}, "kubernetes_version", "supported: 1.34, 1.35, 1.36"),
    ({"endpoint_public_cidrs": "203.0.113.300/32"}, "endpoint_public_cidrs", "give CIDRs"),
    ({"endpoint_public_cidrs": "0.0.0.0/0"}, "endpoint_public_cidrs", "open API endpoint"),
    (
        {"admin_principal_arns": "arn:aws:iam::12345:role/Admin"},
        "admin_principal_arns",
        "IAM role or user ARNs",
    ),
    ({"capacity_reservation_id": "cr-123"}, "capacity_reservation_id", "cr-0123456789abcdef0"),
    ({"capacity_type": "capacity-block"}, "capacity_type", "needs capacity_reservation_id"),
    ({"efa_interface_layout": "ena"}, "efa_interface_layout", "choose one of efa, efa-only"),
    ({"region": "oregon"}, "region", "region code"),
    ({"root_volume_gib": "10"}, "root_volume_gib", "30 to 16384"),
    ({"name_prefix": "Trn_Bert"}, "name_prefix", "lower-case"),
    ({"vpc_cidr": "10.0.0.0/24"}, "vpc_cidr", "do not fit"),
    # A CIDR inside AWS's range whose subnets do not fit (crashed inside aws-cdk-lib before).
    ({"vpc_cidr": "10.0.0.0/17"}, "vpc_cidr", "do not fit"),
    ({"vpc_cidr": "10.0.0.0/18"}, "vpc_cidr", "do not fit"),
    ({"vpc_cidr": "10.0.0.0/12"}, "vpc_cidr", "/16 to /28"),
    ({"vpc_cidr": "fd00::/56"}, "vpc_cidr", "IPv4"),
    # Names built from name_prefix: ECR repository components, stack name.
    ({"name_prefix": "trn-"}, "name_prefix", "ECR repository name 'trn-/training'"),
    ({"name_prefix": "trn--bert"}, "name_prefix", "ECR repository name"),
    ({"name_prefix": "9trn"}, "name_prefix", "starting with a letter"),
    # Public endpoint: all of IPv4 in pieces, too broad, IPv6 on the IPv4 cluster.
    (
        {"endpoint_public_cidrs": "0.0.0.0/1,128.0.0.0/1"},
        "endpoint_public_cidrs",
        "endpoint_public_allow_broad",
    ),
    ({"endpoint_public_cidrs": "10.0.0.0/7"}, "endpoint_public_cidrs", "more than a /8"),
    ({"endpoint_public_cidrs": "203.0.113.0/24,198.0.0.0/8"}, "endpoint_public_cidrs", "more than a /8"),
    ({"endpoint_public_cidrs": "2001:db8::/48"}, "endpoint_public_cidrs", "IPv4"),
    ({"endpoint_public_cidrs": "203.0.113.7/24"}, "endpoint_public_cidrs", "give CIDRs"),
    ({"endpoint_public_allow_broad": "maybe"}, "endpoint_public_allow_broad", "true or false"),
    # Duplicates.
    ({"endpoint_public_cidrs": "203.0.113.7/32,203.0.113.7/32"}, "endpoint_public_cidrs", "listed twice"),
    (
        {"admin_principal_arns": "arn:aws:iam::123456789012:role/A,arn:aws:iam::123456789012:role/A"},
        "admin_principal_arns",
        "listed twice",
    ),
    (
        {
            "existing_vpc_id": "vpc-0123456789abcdef0",
            "existing_private_subnet_ids": "subnet-0123456789abcdef0,subnet-0123456789abcdef0",
        },
        "existing_private_subnet_ids",
        "listed twice",
    ),
    # ARNs in the region's partition.
    (
        {"admin_principal_arns": "arn:aws-cn:iam::123456789012:role/Admin"},
        "admin_principal_arns",
        "partition aws",
    ),
    (
        {"admin_principal_arns": "arn:aws:iam::123456789012:group/Admins"},
        "admin_principal_arns",
        "IAM role or user ARNs",
    ),
    # Region <-> AZ ID in every partition.
    ({"region": "us-gov-west-1"}, "trainium_az_id", "start with 'usgw1-'"),
    ({"region": "cn-northwest-1", "trainium_az_id": "cnnw1-az1"}, "region", "Pod Identity"),
    (
        {"region": "us-east-1", "trainium_az_id": "use1-az6", "second_az_id": "usw2-az3"},
        "second_az_id",
        "start with 'use1-'",
    ),
    ({"region": "us-iso-east-1"}, "region", "partition aws-iso is not supported"),
    ({"region": "us-west-9"}, "region", "not an AWS region"),
    # Tags: AWS's limits.
    ({"tags": json.dumps({f"k{i}": "v" for i in range(50)})}, "tags", "at most 49"),
    ({"tags": json.dumps({"k" * 129: "v"})}, "tags", "1-128 characters"),
    ({"tags": json.dumps({"team": "v" * 257})}, "tags", "at most 256 characters"),
    ({"tags": json.dumps({"AWS:team": "ml"})}, "tags", "'aws:' prefix is reserved"),
    ({"tags": json.dumps({"team": "ml;rm"})}, "tags", "letters, digits, spaces"),
    ({"tags": json.dumps({"Name": "x"})}, "tags", "the platform sets 'Name'"),
    ({"tags": json.dumps({"": "x"})}, "tags", "1-128 characters"),
    ({"existing_vpc_id": "vpc-0123456789abcdef0"}, "existing_private_subnet_ids", "two private subnet ids"),
    ({"tags": "{not json"}, "tags", "not valid JSON"),
    ({"instnce_type": "trn1.32xlarge"}, "instnce_type", "did you mean 'instance_type'"),
]


@pytest.mark.parametrize("context,field,fix", BAD_INPUTS, ids=[b[1] + ":" + b[2] for b in BAD_INPUTS])
def test_given_bad_input_when_loaded_then_one_line_error_names_field_value_and_fix(context, field, fix):
    with pytest.raises(ConfigError) as err:
        config_from_context(context)
    message = str(err.value)
    assert err.value.field_name == field
    assert f"config '{field}'" in message
    assert fix in message
    assert "\n" not in message
