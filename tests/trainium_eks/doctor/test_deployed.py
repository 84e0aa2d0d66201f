"""The deployed model bucket: read from the platform stack's outputs, then its policy, encryption
and Block Public Access, each answer in the shape botocore's model gives it (``Stubber``)."""

from __future__ import annotations

import json

import pytest

from tests.trainium_eks.doctor.stubs import (
    MODEL_BUCKET,
    aws_with,
    bucket_encryption_call,
    bucket_policy_call,
    describe_stack_call,
    public_access_block_call,
    target,
    tls_only_policy,
)
from trainium_eks.doctor.deployed import model_bucket
from trainium_eks.doctor.findings import Status

DEPLOYED = {"WorkloadModelBucketName": MODEL_BUCKET, "WorkloadRepositoryName": "trn-bert"}


def _check(*calls):
    aws = aws_with(calls)
    verdict = model_bucket(target(aws))
    aws.assert_all_asked()
    return verdict


def test_given_no_platform_stack_yet_when_checked_then_ok_and_nothing_else_is_asked():
    verdict = _check(describe_stack_call(None))
    assert verdict == (
        Status.OK,
        "trn-bert-platform is not deployed: the model bucket is checked once it is",
        "",
    )


def test_given_a_platform_from_before_the_bucket_when_checked_then_warn_to_deploy_it():
    verdict = _check(describe_stack_call({"WorkloadRepositoryName": "trn-bert"}))
    assert verdict.status is Status.WARN
    assert "no WorkloadModelBucketName output" in verdict.found
    assert verdict.fix == 'deploy the platform (make cdk ARGS="deploy trn-bert-platform")'


def test_given_the_deployed_bucket_as_the_platform_sets_it_when_checked_then_ok():
    verdict = _check(
        describe_stack_call(DEPLOYED),
        bucket_policy_call(),
        bucket_encryption_call(),
        public_access_block_call(),
    )
    assert verdict == (
        Status.OK,
        f"s3://{MODEL_BUCKET}: TLS only, encrypted at rest, all public access blocked",
        "",
    )


def _without_tls_deny() -> str:
    policy = json.loads(tls_only_policy())
    policy["Statement"][0]["Condition"]["Bool"]["aws:SecureTransport"] = "true"
    return json.dumps(policy)


def _deny_on_the_bucket_only() -> str:
    policy = json.loads(tls_only_policy())
    policy["Statement"][0]["Resource"] = f"arn:aws:s3:::{MODEL_BUCKET}"
    return json.dumps(policy)


@pytest.mark.parametrize(
    "calls, problem",
    [
        (
            [bucket_policy_call(_without_tls_deny()), bucket_encryption_call(), public_access_block_call()],
            "does not deny requests without TLS",
        ),
        (
            [
                bucket_policy_call(_deny_on_the_bucket_only()),
                bucket_encryption_call(),
                public_access_block_call(),
            ],
            "does not deny requests without TLS",
        ),
        (
            [
                bucket_policy_call(),
                bucket_encryption_call(),
                public_access_block_call(BlockPublicPolicy=False),
            ],
            "Block Public Access off: BlockPublicPolicy",
        ),
        # S3 API Reference, error codes: NoSuchBucketPolicy for a bucket without a policy.
        ([bucket_policy_call().failing("NoSuchBucketPolicy", 404)], "no bucket policy"),
        (
            [
                bucket_policy_call(),
                bucket_encryption_call(),
                public_access_block_call().failing("NoSuchPublicAccessBlockConfiguration", 404),
            ],
            "no Block Public Access settings",
        ),
    ],
    ids=["tls-allowed", "objects-not-covered", "public-policy", "no-policy", "no-public-access-block"],
)
def test_given_a_bucket_that_lost_a_setting_when_checked_then_fail_naming_it(calls, problem):
    verdict = _check(describe_stack_call(DEPLOYED), *calls)
    assert verdict.status is Status.FAIL and problem in verdict.found, verdict
    assert (
        verdict.fix
        == 'deploy the platform again (make cdk ARGS="deploy trn-bert-platform") to put back what it sets'
    )


def test_given_a_bucket_deleted_outside_cloudformation_when_checked_then_fail():
    verdict = _check(describe_stack_call(DEPLOYED), bucket_policy_call().failing("NoSuchBucket", 404))
    assert verdict.status is Status.FAIL and "does not exist" in verdict.found
    assert "detect-stack-drift --stack-name trn-bert-platform" in verdict.fix


def test_given_kms_encryption_when_checked_then_it_is_encryption_at_rest_too():
    verdict = _check(
        describe_stack_call(DEPLOYED),
        bucket_policy_call(),
        bucket_encryption_call("aws:kms"),
        public_access_block_call(),
    )
    assert verdict.status is Status.OK
