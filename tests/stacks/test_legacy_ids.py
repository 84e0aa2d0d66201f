"""The former-ID scheme reproduces aws-cdk-lib's unique IDs."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import Names
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from stacks.legacy_ids import keep_self_rule_ids, unique_id


def _self_referencing_group(stack_id: str) -> tuple[cdk.Stack, ec2.SecurityGroup]:
    stack = cdk.Stack(cdk.App(), stack_id)
    scope = Construct(Construct(stack, "Default"), "Storage")
    vpc = ec2.Vpc(stack, "Vpc", nat_gateways=0, subnet_configuration=[])
    group = ec2.SecurityGroup(scope, "SecurityGroup", vpc=vpc, allow_all_outbound=False)
    group.add_ingress_rule(group, ec2.Port.tcp(988), "self")
    return stack, group


def _rule_ids(stack: cdk.Stack) -> set[str]:
    resources = cdk.assertions.Template.from_stack(stack).to_json()["Resources"]
    return {k for k, v in resources.items() if v["Type"] == "AWS::EC2::SecurityGroupIngress"}


def test_given_a_construct_path_then_its_unique_id_is_the_one_aws_cdk_lib_computes():
    _, group = _self_referencing_group("Some-Stack")
    assert unique_id(["Some-Stack", "Default", "Storage", "SecurityGroup"]) == Names.unique_id(group)


def test_given_a_renamed_stack_then_its_self_rule_gets_the_former_stacks_logical_id():
    former = _rule_ids(_self_referencing_group("TrainiumPlatform")[0])
    assert _rule_ids(_self_referencing_group("trn-bert-platform")[0]) != former
    renamed, _ = _self_referencing_group("trn-bert-platform")
    assert keep_self_rule_ids(renamed) == sorted(former)
    assert _rule_ids(renamed) == former
