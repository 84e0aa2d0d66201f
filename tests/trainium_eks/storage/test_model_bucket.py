"""The model bucket: its settings, its outputs, and the one-prefix write grant read from the
synthesized policy."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Match, Template

from tests.support import resources
from trainium_eks import ModelBucket, grant_model_write, model_key_prefix
from trainium_eks.storage.model_bucket import ABANDONED_UPLOAD_DAYS, NONCURRENT_VERSION_DAYS
from trainium_job.errors import ConfigError

PREFIX = "bert-large-phase1/model"


def _bucket(template_json):
    (found,) = resources(template_json, "AWS::S3::Bucket").items()
    return found


def test_given_default_config_then_the_model_bucket_is_encrypted_versioned_private_and_kept(
    platform_template,
):
    platform_template.resource_count_is("AWS::S3::Bucket", 1)
    platform_template.has_resource(
        "AWS::S3::Bucket",
        {
            "Properties": {
                # S3 API Reference, ServerSideEncryptionByDefault: AES256 is SSE-S3.
                "BucketEncryption": {
                    "ServerSideEncryptionConfiguration": [
                        {"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}
                    ]
                },
                "PublicAccessBlockConfiguration": {
                    "BlockPublicAcls": True,
                    "BlockPublicPolicy": True,
                    "IgnorePublicAcls": True,
                    "RestrictPublicBuckets": True,
                },
                # S3 User Guide, "Controlling ownership of objects": BucketOwnerEnforced turns ACLs off.
                "OwnershipControls": {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]},
                "VersioningConfiguration": {"Status": "Enabled"},
                "LifecycleConfiguration": {
                    "Rules": [
                        Match.object_like(
                            {
                                "Status": "Enabled",
                                "NoncurrentVersionExpiration": {"NoncurrentDays": NONCURRENT_VERSION_DAYS},
                                "AbortIncompleteMultipartUpload": {
                                    "DaysAfterInitiation": ABANDONED_UPLOAD_DAYS
                                },
                            }
                        )
                    ]
                },
            },
            "DeletionPolicy": "Retain",
            "UpdateReplacePolicy": "Retain",
        },
    )


def test_given_default_config_then_the_bucket_policy_denies_every_request_without_tls(platform_json):
    bucket_id, _ = _bucket(platform_json)
    (policy,) = resources(platform_json, "AWS::S3::BucketPolicy").values()
    assert policy["Properties"]["Bucket"] == {"Ref": bucket_id}
    # IAM User Guide, aws:SecureTransport: "false" when the request was not sent over TLS.
    assert policy["Properties"]["PolicyDocument"]["Statement"] == [
        {
            "Action": "s3:*",
            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            "Effect": "Deny",
            "Principal": {"AWS": "*"},
            "Resource": [
                {"Fn::GetAtt": [bucket_id, "Arn"]},
                {"Fn::Join": ["", [{"Fn::GetAtt": [bucket_id, "Arn"]}, "/*"]]},
            ],
        }
    ]


def test_given_default_config_then_the_stack_outputs_name_the_bucket(platform_json):
    bucket_id, _ = _bucket(platform_json)
    outputs = platform_json["Outputs"]
    assert outputs["WorkloadModelBucketName"]["Value"] == {"Ref": bucket_id}
    assert outputs["ModelBucketUri"]["Value"] == {"Fn::Join": ["", ["s3://", {"Ref": bucket_id}, "/"]]}


def _granted(prefix: str = PREFIX, *, imported: bool = False) -> list[dict]:
    """The statements of the policy a role gets from the grant, in a small stack of its own."""
    stack = cdk.Stack(cdk.App(), "Models", env=cdk.Environment(region="us-west-2"))
    role = iam.Role(stack, "Writer", assumed_by=iam.ServicePrincipal("pods.eks.amazonaws.com"))
    if imported:
        grant_model_write(role, s3.Bucket.from_bucket_name(stack, "Imported", "trn-models-example"), prefix)
    else:
        ModelBucket(stack, "ModelBucket").grant_write(role, prefix)
    template = Template.from_stack(stack).to_json()
    (policy,) = resources(template, "AWS::IAM::Policy").values()
    assert policy["Properties"]["Roles"] == [{"Ref": next(iter(resources(template, "AWS::IAM::Role")))}]
    return policy["Properties"]["PolicyDocument"]["Statement"]


def test_given_a_writer_when_granted_then_it_may_upload_and_read_back_one_prefix_and_nothing_else():
    bucket_arn = {"Fn::GetAtt": ["ModelBucketEBB1ADF4", "Arn"]}
    # Service Authorization Reference, Amazon S3: CreateMultipartUpload, UploadPart and
    # CompleteMultipartUpload need s3:PutObject; GetObject and HeadObject s3:GetObject;
    # ListObjectsV2 s3:ListBucket, whose s3:prefix condition key is the listing's prefix.
    assert _granted() == [
        {
            "Action": ["s3:PutObject", "s3:AbortMultipartUpload", "s3:GetObject"],
            "Effect": "Allow",
            "Resource": {"Fn::Join": ["", [bucket_arn, f"/{PREFIX}/*"]]},
        },
        {
            "Action": "s3:ListBucket",
            "Condition": {"StringLike": {"s3:prefix": [f"{PREFIX}/*"]}},
            "Effect": "Allow",
            "Resource": bucket_arn,
        },
    ]


def test_given_the_bucket_by_name_in_another_stack_when_granted_then_the_same_one_prefix():
    statements = _granted(imported=True)
    arn = ["arn:", {"Ref": "AWS::Partition"}, ":s3:::trn-models-example"]
    assert [s["Resource"] for s in statements] == [
        {"Fn::Join": ["", [*arn[:2], f"{arn[2]}/{PREFIX}/*"]]},
        {"Fn::Join": ["", arn]},
    ]
    actions = [
        a for s in statements for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    ]
    assert actions == ["s3:PutObject", "s3:AbortMultipartUpload", "s3:GetObject", "s3:ListBucket"]


def test_given_a_prefix_with_a_trailing_slash_then_it_is_the_same_grant():
    assert _granted(PREFIX + "/") == _granted(PREFIX)


@pytest.mark.parametrize(
    "prefix", ["", "/", "/runs/model", "run//model", "run/*", "run/?", "${aws:username}"]
)
def test_given_a_prefix_that_is_not_one_key_prefix_then_config_error_names_it(prefix):
    stack = cdk.Stack(cdk.App(), "Models", env=cdk.Environment(region="us-west-2"))
    role = iam.Role(stack, "Writer", assumed_by=iam.ServicePrincipal("pods.eks.amazonaws.com"))
    with pytest.raises(ConfigError) as err:
        ModelBucket(stack, "ModelBucket").grant_write(role, prefix)
    assert err.value.field_name == "prefix"


@pytest.mark.parametrize("days", [0, -1, 1.5, True])
def test_given_bad_noncurrent_days_then_config_error_names_them(days):
    stack = cdk.Stack(cdk.App(), "Models", env=cdk.Environment(region="us-west-2"))
    with pytest.raises(ConfigError) as err:
        ModelBucket(stack, "ModelBucket", noncurrent_version_days=days)
    assert err.value.field_name == "noncurrent_version_days"


def test_given_a_run_then_its_model_goes_under_its_own_prefix():
    # The folder the trainer writes on FSx, /data/runs/<run>/model, under the run's name.
    assert model_key_prefix("bert-large-phase2") == "bert-large-phase2/model"
