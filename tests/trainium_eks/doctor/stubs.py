"""Stubbed AWS for the doctor's tests: botocore clients behind ``Stubber``, and recorded answers.

``Stubber`` validates each queued answer against the operation's output shape in botocore's
service model (and each request against the input shape), so an answer with a field botocore does
not know (a renamed ``AvailabilityZoneId``, say) fails the test that queues it. The answers below
have the shapes AWS returns (values made up; account 123456789012 is AWS's documentation account).
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import urllib.request
from collections.abc import Iterable
from typing import Any

import botocore.session
from botocore import UNSIGNED
from botocore.config import Config
from botocore.stub import Stubber

from trainium_eks.config import PlatformConfig, config_from_context
from trainium_eks.doctor.check_list import HttpAnswer
from trainium_eks.doctor.requirement import BootstrapRequirement
from trainium_eks.doctor.target import Target
from trainium_eks.versions import DEFAULT_KUBERNETES_VERSION

ACCOUNT = "123456789012"
REGION = "us-west-2"
RESERVATION = "cr-0123456789abcdef0"
REQUIREMENT = BootstrapRequirement(version=6, parameter="/cdk-bootstrap/hnb659fds/version", library="2.275.0")


@functools.cache
def _session() -> botocore.session.Session:
    return botocore.session.get_session()


def output_shape(service: str, operation: str) -> Any:
    """The output shape of ``operation`` in botocore's model of ``service``."""
    return _session().get_service_model(service).operation_model(operation).output_shape


class StubbedAws:
    """:class:`~trainium_eks.doctor.aws.Clients` whose clients answer from queues (``Stubber``)."""

    def __init__(self) -> None:
        self._clients: dict[tuple[str, bool], Any] = {}
        self._stubbers: dict[tuple[str, bool], Stubber] = {}
        self.asked: list[tuple[str, bool]] = []

    def client(self, service: str, *, region: str | None = None, unsigned: bool = False) -> Any:
        """The stubbed client, noted in :attr:`asked` (what the code under test asked for)."""
        self.asked.append((service, unsigned))
        return self._ensure(service, region, unsigned)

    def _ensure(self, service: str, region: str | None, unsigned: bool) -> Any:
        key = (service, unsigned)
        if key not in self._clients:
            client = _session().create_client(
                service,
                region_name=region or REGION,
                aws_access_key_id="testing",
                aws_secret_access_key="testing",
                config=Config(signature_version=UNSIGNED) if unsigned else None,
            )
            stubber = Stubber(client)
            stubber.activate()
            self._clients[key], self._stubbers[key] = client, stubber
        return self._clients[key]

    def stubber(self, service: str, *, unsigned: bool = False) -> Stubber:
        self._ensure(service, None, unsigned)
        return self._stubbers[(service, unsigned)]

    def answer(self, call: Call) -> None:
        """Queue ``call``'s answer (a response, or an error when ``call.error`` is set)."""
        stubber = self.stubber(call.service, unsigned=call.unsigned)
        method = _session().get_service_model(call.service).operation_model(call.operation)
        name = botocore.xform_name(method.name)
        if call.error is not None:
            code, status = call.error
            stubber.add_client_error(
                name, service_error_code=code, http_status_code=status, expected_params=call.params
            )
        else:
            stubber.add_response(name, call.response, call.params)

    def assert_all_asked(self) -> None:
        for stubber in self._stubbers.values():
            stubber.assert_no_pending_responses()


class Call:
    """One expected AWS call: service, operation, parameters and the answer."""

    def __init__(
        self,
        service: str,
        operation: str,
        response: dict[str, Any] | None = None,
        params: dict[str, Any] | None = None,
        *,
        unsigned: bool = False,
        error: tuple[str, int] | None = None,
    ) -> None:
        self.service, self.operation, self.params = service, operation, params
        self.response = response or {}
        self.unsigned, self.error = unsigned, error

    def failing(self, code: str, status: int) -> Call:
        """The same call answered with error ``code`` (HTTP ``status``)."""
        return Call(
            self.service, self.operation, None, self.params, unsigned=self.unsigned, error=(code, status)
        )


def aws_with(calls: Iterable[Call]) -> StubbedAws:
    aws = StubbedAws()
    for call in calls:
        aws.answer(call)
    return aws


def config(**context: str) -> PlatformConfig:
    return config_from_context(context)


def target(aws: StubbedAws, cfg: PlatformConfig | None = None, http: Any = None) -> Target:
    return Target(
        config=cfg or config(),
        aws=aws,
        account=ACCOUNT,
        bootstrap=REQUIREMENT,
        http=http or registry_answers(),
    )


# --- recorded answers -------------------------------------------------------------------------


def quota(service: str, code: str, name: str, value: float) -> dict[str, Any]:
    return {
        "Quota": {
            "ServiceCode": service,
            "ServiceName": "Amazon Elastic Compute Cloud (Amazon EC2)" if service == "ec2" else "Amazon VPC",
            "QuotaArn": f"arn:aws:servicequotas:{REGION}:{ACCOUNT}:{service}/{code}",
            "QuotaCode": code,
            "QuotaName": name,
            "Value": value,
            "Unit": "None",
            "Adjustable": True,
            "GlobalQuota": False,
        }
    }


def quota_call(service: str, code: str, name: str, value: float) -> Call:
    return Call(
        "service-quotas",
        "GetServiceQuota",
        quota(service, code, name, value),
        {"ServiceCode": service, "QuotaCode": code},
    )


def identity_call() -> Call:
    return Call(
        "sts",
        "GetCallerIdentity",
        {
            "UserId": "AROAEXAMPLEID:dev",
            "Account": ACCOUNT,
            "Arn": f"arn:aws:sts::{ACCOUNT}:assumed-role/Dev/dev",
        },
    )


def bootstrap_call(version: str = "30") -> Call:
    return Call(
        "ssm",
        "GetParameter",
        {
            "Parameter": {
                "Name": REQUIREMENT.parameter,
                "Type": "String",
                "Value": version,
                "Version": 1,
                "LastModifiedDate": dt.datetime(2026, 5, 1, tzinfo=dt.timezone.utc),
                "ARN": f"arn:aws:ssm:{REGION}:{ACCOUNT}:parameter{REQUIREMENT.parameter}",
                "DataType": "text",
            }
        },
        {"Name": REQUIREMENT.parameter},
    )


def cluster_versions_call(
    version: str = DEFAULT_KUBERNETES_VERSION, status: str = "STANDARD_SUPPORT", rows: bool = True
) -> Call:
    row = {
        "clusterVersion": version,
        "clusterType": "eks",
        "defaultPlatformVersion": "eks.3",
        "defaultVersion": False,
        "releaseDate": dt.datetime(2026, 7, 1, tzinfo=dt.timezone.utc),
        "endOfStandardSupportDate": dt.datetime(2027, 9, 1, tzinfo=dt.timezone.utc),
        "endOfExtendedSupportDate": dt.datetime(2028, 9, 1, tzinfo=dt.timezone.utc),
        "versionStatus": status,
        "kubernetesPatchVersion": f"{version}.2",
    }
    return Call(
        "eks",
        "DescribeClusterVersions",
        {"clusterVersions": [row] if rows else []},
        {"clusterVersions": [version], "includeAll": True},
    )


def vpcs_call(count: int = 1) -> Call:
    vpcs = [
        {
            "VpcId": f"vpc-0{i:016x}",
            "CidrBlock": f"172.{16 + i}.0.0/16",
            "State": "available",
            "OwnerId": ACCOUNT,
            "IsDefault": i == 0,
            "DhcpOptionsId": "dopt-0123456789abcdef0",
            "InstanceTenancy": "default",
        }
        for i in range(count)
    ]
    return Call("ec2", "DescribeVpcs", {"Vpcs": vpcs}, {})


def addresses_call(count: int = 0) -> Call:
    addresses = [
        {
            "AllocationId": f"eipalloc-0{i:016x}",
            "PublicIp": f"198.51.100.{i + 1}",
            "Domain": "vpc",
            "NetworkBorderGroup": REGION,
            "PublicIpv4Pool": "amazon",
        }
        for i in range(count)
    ]
    return Call(
        "ec2",
        "DescribeAddresses",
        {"Addresses": addresses},
        {"Filters": [{"Name": "domain", "Values": ["vpc"]}]},
    )


def offerings_call(instance_type: str, offered: list[str], locations: list[str] | None) -> Call:
    filters: list[dict[str, Any]] = [{"Name": "instance-type", "Values": [instance_type]}]
    if locations is not None:
        filters.append({"Name": "location", "Values": locations})
    return Call(
        "ec2",
        "DescribeInstanceTypeOfferings",
        {
            "InstanceTypeOfferings": [
                {"InstanceType": instance_type, "LocationType": "availability-zone-id", "Location": az}
                for az in offered
            ]
        },
        {"LocationType": "availability-zone-id", "Filters": filters},
    )


def reservation(**changes: Any) -> dict[str, Any]:
    row = {
        "CapacityReservationId": RESERVATION,
        "OwnerId": ACCOUNT,
        "CapacityReservationArn": f"arn:aws:ec2:{REGION}:{ACCOUNT}:capacity-reservation/{RESERVATION}",
        "AvailabilityZoneId": "usw2-az4",
        "InstanceType": "trn1.32xlarge",
        "InstancePlatform": "Linux/UNIX",
        "AvailabilityZone": "us-west-2d",
        "Tenancy": "default",
        "TotalInstanceCount": 2,
        "AvailableInstanceCount": 2,
        "EbsOptimized": True,
        "EphemeralStorage": False,
        "State": "active",
        "StartDate": dt.datetime(2026, 11, 20, 11, 30, tzinfo=dt.timezone.utc),
        "EndDate": dt.datetime(2026, 11, 27, 11, 30, tzinfo=dt.timezone.utc),
        "EndDateType": "limited",
        "InstanceMatchCriteria": "targeted",
        "CreateDate": dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc),
        "ReservationType": "default",
    }
    row.update(changes)
    return row


def reservations_call(*rows: dict[str, Any]) -> Call:
    return Call(
        "ec2",
        "DescribeCapacityReservations",
        {"CapacityReservations": list(rows)},
        {"CapacityReservationIds": [RESERVATION]},
    )


def head_object_call(bucket: str, key: str, size: int = 45_000_000_000) -> Call:
    return Call(
        "s3",
        "HeadObject",
        {
            "AcceptRanges": "bytes",
            "LastModified": dt.datetime(2023, 3, 1, tzinfo=dt.timezone.utc),
            "ContentLength": size,
            "ETag": '"0123456789abcdef0123456789abcdef-900"',
            "ContentType": "application/x-tar",
            "Metadata": {},
        },
        {"Bucket": bucket, "Key": key},
        unsigned=True,
    )


def list_objects_call(
    bucket: str, prefix: str, sizes: Iterable[int] = (), *, after: str | None = None, more: str | None = None
) -> Call:
    """One page of ListObjectsV2 under ``prefix``: objects of ``sizes`` bytes; ``after``: the
    continuation token the request carries; ``more``: the next page's token (the page is
    truncated)."""
    sizes = list(sizes)
    first = 0 if after is None else int(after.rsplit("-", 1)[1])
    contents = [
        {
            "Key": f"{prefix}part_training_{first + i}.hdf5",
            "LastModified": dt.datetime(2023, 3, 1, tzinfo=dt.timezone.utc),
            "ETag": '"0123456789abcdef0123456789abcdef"',
            "Size": size,
            "StorageClass": "STANDARD",
        }
        for i, size in enumerate(sizes)
    ]
    params: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "MaxKeys": 1000}
    response: dict[str, Any] = {
        "IsTruncated": more is not None,
        "Contents": contents,
        "Name": bucket,
        "Prefix": prefix,
        "MaxKeys": 1000,
        "KeyCount": len(contents),
    }
    if after is not None:
        params["ContinuationToken"] = response["ContinuationToken"] = after
    if more is not None:
        response["NextContinuationToken"] = more
    return Call("s3", "ListObjectsV2", response, params, unsigned=True)


# --- the registry -----------------------------------------------------------------------------

DIGEST = "sha256:" + "ab" * 32


class RegistryAnswers:
    """An :data:`~trainium_eks.doctor.check_list.Http` that answers from a list and keeps the requests."""

    def __init__(self, answers: list[HttpAnswer]) -> None:
        self.answers = list(answers)
        self.requests: list[urllib.request.Request] = []

    def __call__(self, request: urllib.request.Request) -> HttpAnswer:
        self.requests.append(request)
        return self.answers.pop(0)


#: Hugging Face's answer to a HEAD of a pinned file kept in its storage: a redirect there, with the
#: file's size and SHA-256 (the headers huggingface_hub 2.4.0 ``get_hf_file_metadata`` reads).
HELDOUT_HEAD = HttpAnswer(
    302,
    {
        "location": "https://cas-bridge.xethub.hf.co/xet-bridge-us/pg19-test.parquet",
        "x-linked-size": "24900000",
        "x-linked-etag": '"0a1b2c"',
    },
)


def registry_answers(manifest_status: int = 200) -> RegistryAnswers:
    """A token, then the manifest's status (with its digest when it exists); then the held-out
    books' HEAD (:data:`HELDOUT_HEAD`), the next check that asks over HTTP."""
    headers = {"docker-content-digest": DIGEST} if manifest_status == 200 else {}
    return RegistryAnswers(
        [HttpAnswer(200, {}, b'{"token": "anonymous"}'), HttpAnswer(manifest_status, headers), HELDOUT_HEAD]
    )


# --- the deployed platform ----------------------------------------------------------------------

#: A model bucket name as CloudFormation makes them (stack name, logical ID, random suffix).
MODEL_BUCKET = "trn-bert-platform-modelbucketebb1adf4-0a1b2c3d4e5f"


def describe_stack_call(outputs: dict[str, str] | None = None, status: str = "UPDATE_COMPLETE") -> Call:
    """DescribeStacks of the platform stack with ``outputs``; ``None`` answers as CloudFormation
    does for a stack that does not exist (ValidationError, HTTP 400)."""
    call = Call(
        "cloudformation",
        "DescribeStacks",
        {
            "Stacks": [
                {
                    "StackId": f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack/trn-bert-platform/"
                    "0a1b2c3d-0000-1111-2222-333344445555",
                    "StackName": "trn-bert-platform",
                    "CreationTime": dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc),
                    "StackStatus": status,
                    "Outputs": [
                        {"OutputKey": key, "OutputValue": value, "Description": "For the training stack"}
                        for key, value in (outputs or {}).items()
                    ],
                }
            ]
        },
        {"StackName": "trn-bert-platform"},
    )
    return call.failing("ValidationError", 400) if outputs is None else call


def tls_only_policy(bucket: str = MODEL_BUCKET) -> str:
    """The policy aws-cdk-lib writes for ``enforceSSL`` (as the synthesized template has it)."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Deny",
                    "Principal": {"AWS": "*"},
                    "Action": "s3:*",
                    "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"],
                    "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                }
            ],
        }
    )


def _bucket_params(bucket: str) -> dict[str, Any]:
    return {"Bucket": bucket, "ExpectedBucketOwner": ACCOUNT}


def bucket_policy_call(policy: str | None = None, bucket: str = MODEL_BUCKET) -> Call:
    return Call(
        "s3", "GetBucketPolicy", {"Policy": policy or tls_only_policy(bucket)}, _bucket_params(bucket)
    )


def bucket_encryption_call(algorithm: str = "AES256", bucket: str = MODEL_BUCKET) -> Call:
    rule = {"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": algorithm}, "BucketKeyEnabled": False}
    return Call(
        "s3",
        "GetBucketEncryption",
        {"ServerSideEncryptionConfiguration": {"Rules": [rule]}},
        _bucket_params(bucket),
    )


def public_access_block_call(bucket: str = MODEL_BUCKET, **off: bool) -> Call:
    settings = {
        name: off.get(name, True)
        for name in ("BlockPublicAcls", "IgnorePublicAcls", "BlockPublicPolicy", "RestrictPublicBuckets")
    }
    return Call(
        "s3", "GetPublicAccessBlock", {"PublicAccessBlockConfiguration": settings}, _bucket_params(bucket)
    )
