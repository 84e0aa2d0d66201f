"""Service Quotas the platform draws on, and how to read one."""

from __future__ import annotations

from dataclasses import dataclass

from botocore.exceptions import ClientError

from .aws import Clients, error_code


@dataclass(frozen=True)
class Quota:
    """One Service Quotas entry: where it lives and the name AWS gives it.

    The codes are stable identifiers of Service Quotas (``ListServiceQuotas`` pairs each with the
    name below); the name is compared with what AWS answers, so a reassigned code shows up.
    """

    service: str
    code: str
    name: str

    def increase_command(self, region: str, desired: float) -> str:
        """The CLI line that asks for ``desired``."""
        return (
            f"aws service-quotas request-service-quota-increase --service-code {self.service} "
            f"--quota-code {self.code} --desired-value {desired:g} --region {region}"
        )


#: vCPUs of running On-Demand trn1/trn1n/trn2 instances (zero or low in many accounts).
TRN_VCPUS = Quota("ec2", "L-2C3B7624", "Running On-Demand Trn instances")
#: VPCs per Region (the platform creates one unless ``existing_vpc_id``).
VPCS = Quota("vpc", "L-F678F1CE", "VPCs per Region")
#: Elastic IPs (one per NAT gateway of the created VPC).
ELASTIC_IPS = Quota("ec2", "L-0263D0A3", "EC2-VPC Elastic IPs")


@dataclass(frozen=True)
class QuotaValue:
    """A quota's value as AWS answered it, and the name it answered with."""

    value: float
    name: str
    default: bool

    def describe(self, quota: Quota) -> str:
        """``'<name>' (<code>) is <value>`` with a note when it is AWS's default."""
        note = " (AWS default; never adjusted)" if self.default else ""
        return f"'{self.name}' ({quota.code}) is {self.value:g}{note}"


def quota_value(aws: Clients, quota: Quota) -> QuotaValue:
    """The applied value of ``quota``; AWS's default where the account has none applied."""
    client = aws.client("service-quotas")
    try:
        answer = client.get_service_quota(ServiceCode=quota.service, QuotaCode=quota.code)
        default = False
    except ClientError as err:
        if error_code(err) != "NoSuchResourceException":
            raise
        answer = client.get_aws_default_service_quota(ServiceCode=quota.service, QuotaCode=quota.code)
        default = True
    entry = answer["Quota"]
    return QuotaValue(
        value=float(entry["Value"]), name=str(entry.get("QuotaName", quota.name)), default=default
    )


def renamed(quota: Quota, answered: QuotaValue) -> str:
    """A note when AWS names the code differently than expected, else empty."""
    if answered.name.lower() == quota.name.lower():
        return ""
    return f" (expected '{quota.name}' under {quota.code}: check the code in the Service Quotas console)"
