"""Room in the account's VPC and Elastic IP quotas for what the platform creates."""

from __future__ import annotations

from tests.trainium_eks.doctor.stubs import addresses_call, aws_with, config, quota_call, target, vpcs_call
from trainium_eks.doctor import account
from trainium_eks.doctor.findings import Status

VPCS = ("vpc", "L-F678F1CE", "VPCs per Region")
EIPS = ("ec2", "L-0263D0A3", "EC2-VPC Elastic IPs")


def test_given_room_for_one_more_vpc_when_checked_then_ok():
    aws = aws_with([vpcs_call(4), quota_call(*VPCS, 5)])
    verdict = account.vpc_quota(target(aws))
    aws.assert_all_asked()
    assert verdict == (
        Status.OK,
        "'VPCs per Region' (L-F678F1CE) is 5; 4 in use, the platform adds 1 (its VPC)",
        "",
    )


def test_given_every_vpc_in_use_when_checked_then_fail_with_the_increase_command():
    verdict = account.vpc_quota(target(aws_with([vpcs_call(5), quota_call(*VPCS, 5)])))
    assert verdict.status is Status.FAIL
    assert verdict.fix.endswith("--quota-code L-F678F1CE --desired-value 6 --region us-west-2")


def test_given_one_eip_per_nat_gateway_when_checked_then_the_count_follows_nat_gateways():
    aws = aws_with([addresses_call(3), quota_call(*EIPS, 5)])
    verdict = account.eip_quota(target(aws, config(nat_gateways="2")))
    assert verdict.status is Status.OK
    assert "3 in use, the platform adds 2 (NAT gateways)" in verdict.found
    short = account.eip_quota(
        target(aws_with([addresses_call(4), quota_call(*EIPS, 5)]), config(nat_gateways="2"))
    )
    assert short.status is Status.FAIL


def test_given_an_existing_vpc_when_checked_then_nothing_is_created_or_asked():
    cfg = config(
        existing_vpc_id="vpc-0123456789abcdef0",
        existing_private_subnet_ids="subnet-0aaaaaaaaaaaaaaaa,subnet-0bbbbbbbbbbbbbbbb",
    )
    aws = aws_with([])
    assert account.vpc_quota(target(aws, cfg)).status is Status.OK
    assert account.eip_quota(target(aws, cfg)).status is Status.OK
    assert aws.asked == []
