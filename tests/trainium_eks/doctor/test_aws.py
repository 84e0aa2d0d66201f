"""AWS error answers as report lines, and the recorded answers checked against botocore's model."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError, ParamValidationError
from botocore.stub import Stubber

from tests.trainium_eks.doctor.stubs import (
    MODEL_BUCKET,
    StubbedAws,
    addresses_call,
    bootstrap_call,
    bucket_encryption_call,
    bucket_policy_call,
    cluster_versions_call,
    describe_stack_call,
    head_object_call,
    identity_call,
    list_objects_call,
    offerings_call,
    public_access_block_call,
    quota_call,
    reservation,
    reservations_call,
    vpcs_call,
)
from trainium_eks.doctor.aws import IAM_ACTIONS, finding_from_error
from trainium_eks.doctor.findings import Status


def client_error(code: str, operation: str, status: int = 400) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": "message"}, "ResponseMetadata": {"HTTPStatusCode": status}},
        operation,
    )


@pytest.mark.parametrize(
    ("code", "operation"),
    [
        ("ThrottlingException", "GetServiceQuota"),  # Service Quotas, EKS
        ("TooManyRequestsException", "GetServiceQuota"),
        ("RequestLimitExceeded", "DescribeInstanceTypeOfferings"),  # EC2
        ("ThrottlingException", "GetParameter"),  # SSM
        ("SlowDown", "HeadObject"),  # S3
    ],
)
def test_given_a_throttled_call_when_reported_then_warn_to_run_again(code, operation):
    finding = finding_from_error("x", client_error(code, operation))
    assert finding.status is Status.WARN
    assert finding.found == f"throttled by AWS on {operation} ({code}) after retries"


@pytest.mark.parametrize(
    ("code", "operation", "action"),
    [
        ("AccessDeniedException", "GetServiceQuota", "servicequotas:GetServiceQuota"),
        ("UnauthorizedOperation", "DescribeCapacityReservations", "ec2:DescribeCapacityReservations"),
        ("AccessDeniedException", "DescribeClusterVersions", "eks:DescribeClusterVersions"),
        ("AccessDeniedException", "GetParameter", "ssm:GetParameter"),
    ],
)
def test_given_a_denied_call_when_reported_then_warn_naming_the_iam_action(code, operation, action):
    finding = finding_from_error("x", client_error(code, operation))
    assert finding.status is Status.WARN
    assert finding.fix == f"grant {action} to the caller (README: make doctor)"


def test_given_no_or_refused_credentials_when_reported_then_fail():
    assert finding_from_error("x", NoCredentialsError()).status is Status.FAIL
    assert finding_from_error("x", client_error("ExpiredToken", "GetCallerIdentity")).status is Status.FAIL


def test_given_no_network_when_reported_then_warn():
    err = EndpointConnectionError(endpoint_url="https://ec2.us-west-2.amazonaws.com/")
    assert finding_from_error("x", err).status is Status.WARN


RECORDED = [
    identity_call(),
    bootstrap_call(),
    cluster_versions_call(),
    vpcs_call(2),
    addresses_call(1),
    quota_call("ec2", "L-2C3B7624", "Running On-Demand Trn instances", 256),
    offerings_call("trn1.32xlarge", ["usw2-az4"], ["usw2-az4"]),
    reservations_call(reservation()),
    head_object_call("neuron-s3", "x.tar"),
    list_objects_call("bucket", "prefix/", [1_000_000], more="page-1"),
    list_objects_call("bucket", "prefix/", [1_000_000], after="page-1"),
    describe_stack_call({"WorkloadModelBucketName": MODEL_BUCKET}),
    bucket_policy_call(),
    bucket_encryption_call(),
    public_access_block_call(),
]


@pytest.mark.parametrize("call", RECORDED, ids=lambda c: c.operation)
def test_given_each_recorded_answer_then_botocore_accepts_it_and_its_action_is_listed(call):
    aws = StubbedAws()
    aws.answer(call)  # Stubber validates the answer against the operation's output shape
    assert call.operation in IAM_ACTIONS


def test_given_an_answer_with_a_renamed_field_then_the_stub_refuses_it():
    aws = StubbedAws()
    row = reservation()
    row["AvailabilityZoneID"] = row.pop("AvailabilityZoneId")
    with pytest.raises(ParamValidationError, match="AvailabilityZoneID"):
        aws.answer(reservations_call(row))


def test_given_the_stubber_then_it_validates_answers_against_the_model():
    # What the recorded-shape tests rely on: botocore's Stubber checks each queued answer.
    stubber = Stubber(StubbedAws().client("ec2"))
    with pytest.raises(ParamValidationError):
        stubber.add_response("describe_vpcs", {"Vpcs": [{"VpcIdentifier": "vpc-1"}]})
