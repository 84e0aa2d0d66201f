"""The model bucket: the S3 bucket the trained models leave the platform in.

Encryption at rest is SSE-S3 (S3-managed keys, AES-256), not a customer-managed KMS key as the
file system, the flow logs and the cluster's secrets have:

- what the bucket holds is meant to be handed on (a Hugging Face folder to load elsewhere), and
  who may read or write it is decided by IAM, this bucket's policy and Block Public Access; a
  key of its own would add a second gate that every reader (a person's ``aws s3 cp``, an
  inference endpoint, another account) must also pass;
- the writer lives in the training stack, which knows the bucket only by the name it reads
  from this stack's outputs: with a key, its ARN would be a second output to read and its
  policy a second grant to keep in step;
- FSx for Lustre exports to an SSE-S3 bucket as it is, but to an SSE-KMS bucket only once the
  key's policy names the file system's own service-linked role,
  ``AWSServiceRoleForFSxS3Access_<file system id>`` (FSx for Lustre User Guide, "Working with
  server-side encrypted Amazon S3 buckets"), a role named after each file system;
- a key costs $1 a month and its requests are billed (AWS KMS pricing); SSE-S3 costs nothing.

The rest: TLS only (a bucket policy denies ``aws:SecureTransport`` false), all public access
blocked, ACLs off (BucketOwnerEnforced), versioned (a model overwritten or deleted is kept as a
noncurrent version for :data:`NONCURRENT_VERSION_DAYS`), the parts of an upload that never
completed removed after :data:`ABANDONED_UPLOAD_DAYS`, and RETAIN: deleting the stack keeps the
bucket and the models in it.
"""

from __future__ import annotations

import re

from aws_cdk import Duration, RemovalPolicy, Token
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

from trainium_job.errors import ConfigError

from ..nag import MODEL_BUCKET_ACKNOWLEDGEMENTS, acknowledge_own_findings

#: Days S3 keeps a model object's older version once it is overwritten or deleted.
NONCURRENT_VERSION_DAYS = 90
#: Days after which S3 removes the uploaded parts of a multipart upload that never completed
#: (they are stored and billed until then, and invisible in a listing).
ABANDONED_UPLOAD_DAYS = 7
#: The platform stack's output with the bucket's name (:data:`trainium_eks.platform.WORKLOAD_OUTPUTS`):
#: the training stack reads it, and so does ``make doctor``.
BUCKET_NAME_OUTPUT = "WorkloadModelBucketName"
#: The platform stack's output with the bucket's S3 URI, for people.
BUCKET_URI_OUTPUT = "ModelBucketUri"
_UNSAFE_PREFIX = re.compile(r"[*?$]|//|^/|^$")


def check_key_prefix(prefix: str) -> str:
    """``prefix`` without its trailing ``/``; ConfigError for one that is empty, starts with
    ``/``, has an empty segment, or holds a character IAM reads as a wildcard or variable."""
    if Token.is_unresolved(prefix):
        return prefix
    trimmed = prefix.rstrip("/")
    if _UNSAFE_PREFIX.search(trimmed):
        raise ConfigError(
            "prefix",
            prefix,
            "give one key prefix such as 'bert-large-phase1/model': not empty, no leading '/', "
            "no '//', no '*', '?' or '$' (IAM reads those as wildcards and variables)",
        )
    return trimmed


def grant_model_write(principal: iam.IGrantable, bucket: s3.IBucket, prefix: str) -> iam.Grant:
    """Let ``principal`` upload objects under ``<prefix>/`` of ``bucket`` and read them back,
    nothing else.

    - ``s3:PutObject`` on ``<prefix>/*``: a single or multipart upload, with its checksum
      (CreateMultipartUpload, UploadPart and CompleteMultipartUpload are all ``s3:PutObject``);
    - ``s3:AbortMultipartUpload`` there: a failed upload removes its parts at once;
    - ``s3:GetObject`` there: the verification read (GetObject, and HeadObject with its
      checksum);
    - ``s3:ListBucket`` on the bucket, only for a listing whose prefix is under ``<prefix>/``.

    No delete, and nothing outside the prefix. The bucket is SSE-S3, so no KMS permission is
    needed. Works for a bucket of this stack (:class:`ModelBucket`) or one imported by name in
    another (``s3.Bucket.from_bucket_name`` with the platform's :data:`BUCKET_NAME_OUTPUT`).
    """
    prefix = check_key_prefix(prefix)
    objects = iam.Grant.add_to_principal(
        grantee=principal,
        actions=["s3:PutObject", "s3:AbortMultipartUpload", "s3:GetObject"],
        resource_arns=[bucket.arn_for_objects(f"{prefix}/*")],
    )
    listing = iam.Grant.add_to_principal(
        grantee=principal,
        actions=["s3:ListBucket"],
        resource_arns=[bucket.bucket_arn],
        conditions={"StringLike": {"s3:prefix": [f"{prefix}/*"]}},
    )
    return objects.combine(listing)


class ModelBucket(Construct):
    """The bucket the trained models are written to (see the module docstring for its settings).

    Its name is CloudFormation's (unique, unknown until deploy): the platform publishes it as
    the stack output :data:`BUCKET_NAME_OUTPUT`. A run's model goes under
    :func:`model_key_prefix`; :meth:`grant_write` gives a writer that prefix and no more.

    Attributes:
        bucket: the ``s3.Bucket``.
        bucket_name: its name (a token until deploy).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        noncurrent_version_days: int = NONCURRENT_VERSION_DAYS,
        removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
    ) -> None:
        """
        Args:
            noncurrent_version_days: days an overwritten or deleted object's older version is
                kept, 1 or more. Default :data:`NONCURRENT_VERSION_DAYS` (90).
            removal_policy: what a stack delete or a replacement does to the bucket. Default
                ``RemovalPolicy.RETAIN``: the models outlive the stack.
        """
        super().__init__(scope, id)
        if not Token.is_unresolved(noncurrent_version_days) and (
            isinstance(noncurrent_version_days, bool)
            or not isinstance(noncurrent_version_days, int)
            or noncurrent_version_days < 1
        ):
            raise ConfigError(
                "noncurrent_version_days", noncurrent_version_days, "give a whole number of days, 1 or more"
            )
        self.bucket = s3.Bucket(
            self,
            "Bucket",
            encryption=s3.BucketEncryption.S3_MANAGED,
            enforce_ssl=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            versioned=True,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="KeepOldVersionsThenExpire",
                    noncurrent_version_expiration=Duration.days(noncurrent_version_days),
                    abort_incomplete_multipart_upload_after=Duration.days(ABANDONED_UPLOAD_DAYS),
                )
            ],
            removal_policy=removal_policy,
        )
        self.bucket_name: str = self.bucket.bucket_name
        acknowledge_own_findings(self, MODEL_BUCKET_ACKNOWLEDGEMENTS)

    def grant_write(self, principal: iam.IGrantable, prefix: str) -> iam.Grant:
        """:func:`grant_model_write` on this bucket: ``principal`` may upload under
        ``<prefix>/`` and read it back, nothing else."""
        return grant_model_write(principal, self.bucket, prefix)
