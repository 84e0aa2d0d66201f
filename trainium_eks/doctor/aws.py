"""The doctor's AWS side: read-only clients, and AWS's error answers turned into findings.

Every call the checks make is listed in :data:`IAM_ACTIONS` with the IAM action it needs (the
README's permission list). An answer that says "not allowed" or "slow down" (after botocore's
own retries) becomes a ``warn`` line naming that action, never a traceback: the check could not
tell, which is not the same as a blocker.
"""

from __future__ import annotations

from typing import Any, Protocol

import boto3
import botocore.session
from botocore import UNSIGNED
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    EndpointConnectionError,
    NoCredentialsError,
    ProfileNotFound,
)

from .findings import Finding, Status

#: API operation -> the IAM action it needs. All are read-only; none creates anything.
IAM_ACTIONS: dict[str, str] = {
    "GetCallerIdentity": "sts:GetCallerIdentity",
    "GetServiceQuota": "servicequotas:GetServiceQuota",
    "GetAWSDefaultServiceQuota": "servicequotas:GetAWSDefaultServiceQuota",
    "DescribeInstanceTypeOfferings": "ec2:DescribeInstanceTypeOfferings",
    "DescribeCapacityReservations": "ec2:DescribeCapacityReservations",
    "DescribeVpcs": "ec2:DescribeVpcs",
    "DescribeAddresses": "ec2:DescribeAddresses",
    "DescribeClusterVersions": "eks:DescribeClusterVersions",
    "GetParameter": "ssm:GetParameter",
    # The dataset is read without signing (as the staging Job reads it): these are the actions the
    # bucket policy must allow to everyone, not permissions of the caller.
    "HeadObject": "s3:GetObject",
    "ListObjectsV2": "s3:ListBucket",
    # The deployed model bucket (checked once the platform stack exists).
    "DescribeStacks": "cloudformation:DescribeStacks",
    "GetBucketPolicy": "s3:GetBucketPolicy",
    "GetBucketEncryption": "s3:GetEncryptionConfiguration",
    "GetPublicAccessBlock": "s3:GetBucketPublicAccessBlock",
}

#: Error codes that mean "slow down" (EC2 says RequestLimitExceeded, most others Throttling*).
THROTTLING_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestLimitExceeded",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "SlowDown",
    }
)
#: Error codes that mean "not allowed" (S3's HEAD answers carry only the HTTP status).
ACCESS_DENIED_CODES = frozenset(
    {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "Forbidden", "403"}
)
#: Error codes of credentials that AWS does not accept.
BAD_CREDENTIALS_CODES = frozenset(
    {
        "ExpiredToken",
        "ExpiredTokenException",
        "InvalidClientTokenId",
        "UnrecognizedClientException",
        "AuthFailure",
        "SignatureDoesNotMatch",
    }
)


class UnknownProfile(Exception):
    """The AWS profile asked for (``--profile`` or ``AWS_PROFILE``) is not defined: one line for the user."""


class Clients(Protocol):
    """Where the checks get their clients (boto3 in use, stubbed clients in tests)."""

    def client(self, service: str, *, region: str | None = None, unsigned: bool = False) -> Any:
        """A client of ``service`` in ``region`` (default: the platform's), unsigned if asked."""
        ...


class BotoClients:
    """boto3 clients of one session, made once per service, region and signing.

    Args:
        region: the platform's region (the configuration's, not the profile's).
        profile: AWS profile name; None: boto3's usual chain (environment, SSO, instance role).
    """

    #: botocore retries throttled calls itself (standard mode, backing off) before we see them.
    CONFIG = Config(
        retries={"mode": "standard", "max_attempts": 5},
        connect_timeout=10,
        read_timeout=30,
        user_agent_extra="trainium-eks-doctor",
    )

    def __init__(self, *, region: str, profile: str | None = None) -> None:
        self.region = region
        try:
            self.session = boto3.Session(profile_name=profile)
        except ProfileNotFound as err:
            raise UnknownProfile(
                profile_not_found(err.kwargs.get("profile"), given=profile is not None)
            ) from None
        self._clients: dict[tuple[str, str, bool], Any] = {}

    def client(self, service: str, *, region: str | None = None, unsigned: bool = False) -> Any:
        key = (service, region or self.region, unsigned)
        if key not in self._clients:
            config = self.CONFIG.merge(Config(signature_version=UNSIGNED)) if unsigned else self.CONFIG
            self._clients[key] = self.session.client(service, region_name=key[1], config=config)
        return self._clients[key]


def profile_not_found(name: str | None, *, given: bool) -> str:
    """The one line for a profile that no AWS config or credentials file defines (``given``: it
    came from ``--profile``, else from ``AWS_PROFILE``)."""
    source = "--profile" if given else "AWS_PROFILE"
    known = ", ".join(available_profiles()) or "none"
    return (
        f"{source} {name}: no such AWS profile in the AWS config or credentials files (profiles there: "
        f"{known}); create it with 'aws configure --profile {name}' or 'aws configure sso', or name one "
        "of those"
    )


def available_profiles() -> list[str]:
    """Profiles the AWS config and credentials files define (read without resolving any profile)."""
    session = botocore.session.Session()
    session.set_config_variable("profile", None)
    return sorted(session.available_profiles)


def error_code(err: ClientError) -> str:
    """The AWS error code of ``err`` (S3's HEAD: the HTTP status as a string)."""
    return str(err.response.get("Error", {}).get("Code", ""))


def finding_from_error(check: str, err: ClientError | BotoCoreError) -> Finding:
    """The line for a check that AWS answered with an error, naming the IAM action where it is one."""
    if isinstance(err, NoCredentialsError):
        return Finding(
            Status.FAIL,
            check,
            "no AWS credentials found",
            "configure some (aws configure sso, AWS_PROFILE, or environment variables)",
        )
    if isinstance(err, EndpointConnectionError):
        return Finding(
            Status.WARN, check, f"could not reach AWS ({err})", "check the network and run it again"
        )
    if isinstance(err, ClientError):
        code, operation = error_code(err), err.operation_name
        action = IAM_ACTIONS.get(operation, operation)
        if code in THROTTLING_CODES:
            return Finding(
                Status.WARN,
                check,
                f"throttled by AWS on {operation} ({code}) after retries",
                "run `make doctor` again in a minute",
            )
        if code in ACCESS_DENIED_CODES:
            return Finding(
                Status.WARN,
                check,
                f"not allowed to call {operation} ({code}), so not checked",
                f"grant {action} to the caller (README: make doctor)",
            )
        if code in BAD_CREDENTIALS_CODES:
            return Finding(
                Status.FAIL,
                check,
                f"AWS refused the credentials ({code})",
                "renew them (aws sso login, or new keys) and run it again",
            )
        message = err.response.get("Error", {}).get("Message", "")
        return Finding(Status.WARN, check, f"{operation} failed: {code} {message}".rstrip())
    return Finding(Status.WARN, check, f"AWS call failed: {err}")
