"""What the account already holds: who the caller is, and room for the VPC and its NAT EIPs."""

from __future__ import annotations

from .findings import Status, Verdict
from .quotas import ELASTIC_IPS, VPCS, Quota, QuotaValue, quota_value, renamed
from .target import Target


def _room(quota: Quota, answered: QuotaValue, used: int, need: int, what: str, region: str) -> Verdict:
    found = f"{answered.describe(quota)}; {used} in use, the platform adds {need} ({what}){renamed(quota, answered)}"
    if used + need > answered.value:
        return Verdict(
            Status.FAIL,
            found,
            f"release unused ones or ask for more: {quota.increase_command(region, used + need)}",
        )
    return Verdict(Status.OK, found)


def vpc_quota(t: Target) -> Verdict:
    """VPCs per Region against those in use plus the one the platform creates."""
    c = t.config
    if c.existing_vpc_id:
        return Verdict(Status.OK, f"existing VPC {c.existing_vpc_id}: the platform creates none")
    pages = t.aws.client("ec2").get_paginator("describe_vpcs").paginate()
    used = sum(len(page["Vpcs"]) for page in pages)
    return _room(VPCS, quota_value(t.aws, VPCS), used, 1, "its VPC", c.region)


def eip_quota(t: Target) -> Verdict:
    """Elastic IPs against those allocated plus one per NAT gateway of the created VPC."""
    c = t.config
    if c.existing_vpc_id:
        return Verdict(Status.OK, f"existing VPC {c.existing_vpc_id}: no NAT gateway, no Elastic IP created")
    answer = t.aws.client("ec2").describe_addresses(Filters=[{"Name": "domain", "Values": ["vpc"]}])
    used = len(answer["Addresses"])
    return _room(ELASTIC_IPS, quota_value(t.aws, ELASTIC_IPS), used, c.nat_gateways, "NAT gateways", c.region)
