"""What a deployed platform holds: the model bucket the trained models are written to.

The bucket's name is CloudFormation's, so it is read where the training stack reads it: the
platform stack's output :data:`~trainium_eks.storage.model_bucket.BUCKET_NAME_OUTPUT`
(CloudFormation DescribeStacks). Before the first deploy there is nothing to check.
"""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import ClientError

from trainium_job.naming import platform_stack_name

from ..storage.model_bucket import BUCKET_NAME_OUTPUT
from .aws import error_code
from .findings import Status, Verdict
from .target import Target

#: The four Block Public Access settings (S3 API Reference, PublicAccessBlockConfiguration).
PUBLIC_ACCESS_SETTINGS = ("BlockPublicAcls", "IgnorePublicAcls", "BlockPublicPolicy", "RestrictPublicBuckets")
#: Default encryption algorithms that encrypt at rest (S3 API Reference, ServerSideEncryptionByDefault).
ENCRYPTING_ALGORITHMS = frozenset({"AES256", "aws:kms", "aws:kms:dsse"})
#: What S3 answers for a bucket with none of the setting asked for (S3 API Reference, error codes).
_NOT_SET = {
    "NoSuchBucketPolicy": "no bucket policy, so nothing denies requests without TLS",
    "ServerSideEncryptionConfigurationNotFoundError": "no default encryption",
    "NoSuchPublicAccessBlockConfiguration": "no Block Public Access settings",
}


def model_bucket(t: Target) -> Verdict:
    """The deployed model bucket refuses requests without TLS, encrypts at rest and blocks all
    public access (what :class:`~trainium_eks.storage.model_bucket.ModelBucket` sets); read-only."""
    stack = platform_stack_name(t.config.name_prefix)
    name = _bucket_name(t, stack)
    if isinstance(name, Verdict):
        return name
    s3 = t.aws.client("s3")
    # The caller's account must own it: a bucket of another account answers 403, not its settings.
    mine = {"Bucket": name, "ExpectedBucketOwner": t.account}
    redeploy = f'deploy the platform again (make cdk ARGS="deploy {stack}") to put back what it sets'
    try:
        problems = [
            *_tls_problems(s3.get_bucket_policy(**mine), name),
            *_encryption_problems(s3.get_bucket_encryption(**mine)),
            *_public_access_problems(s3.get_public_access_block(**mine)),
        ]
    except ClientError as err:
        code = error_code(err)
        if code == "NoSuchBucket":
            return Verdict(
                Status.FAIL,
                f"s3://{name} ({stack} output {BUCKET_NAME_OUTPUT}) does not exist: deleted outside "
                "CloudFormation, so no model can be written",
                f"see `aws cloudformation detect-stack-drift --stack-name {stack}`; delete and deploy {stack} "
                "again to get a new bucket",
            )
        if code in _NOT_SET:
            return Verdict(Status.FAIL, f"s3://{name}: {_NOT_SET[code]}", redeploy)
        raise
    if problems:
        return Verdict(Status.FAIL, f"s3://{name}: {'; '.join(problems)}", redeploy)
    return Verdict(Status.OK, f"s3://{name}: TLS only, encrypted at rest, all public access blocked")


def _bucket_name(t: Target, stack: str) -> str | Verdict:
    """The bucket's name from the stack's outputs, or the verdict when there is none to check."""
    try:
        answer = t.aws.client("cloudformation").describe_stacks(StackName=stack)
    except ClientError as err:
        # CloudFormation answers ValidationError "Stack with id ... does not exist".
        if error_code(err) != "ValidationError":
            raise
        return Verdict(Status.OK, f"{stack} is not deployed: the model bucket is checked once it is")
    (found,) = answer["Stacks"]
    outputs = {o["OutputKey"]: o.get("OutputValue", "") for o in found.get("Outputs", [])}
    if BUCKET_NAME_OUTPUT not in outputs:
        return Verdict(
            Status.WARN,
            f"{stack} ({found['StackStatus']}) has no {BUCKET_NAME_OUTPUT} output: deployed before the "
            "model bucket, or not finished",
            f'deploy the platform (make cdk ARGS="deploy {stack}")',
        )
    return outputs[BUCKET_NAME_OUTPUT]


def _tls_problems(answer: dict[str, Any], name: str) -> list[str]:
    """Whether the policy denies every request made without TLS (``aws:SecureTransport`` false)
    on the bucket and its objects."""
    statements = json.loads(answer["Policy"]).get("Statement", [])
    if isinstance(statements, dict):
        statements = [statements]
    if any(_denies_plain_http(s, name) for s in statements):
        return []
    return ["its policy does not deny requests without TLS (aws:SecureTransport false) on it and its objects"]


def _listed(value: Any) -> list[Any]:
    """A policy element that may be one value or a list, as a list (IAM JSON policy grammar)."""
    return value if isinstance(value, list) else [value]


def _denies_plain_http(statement: dict[str, Any], name: str) -> bool:
    principal = statement.get("Principal")
    everyone = principal == "*" or (isinstance(principal, dict) and "*" in _listed(principal.get("AWS")))
    secure = _listed(statement.get("Condition", {}).get("Bool", {}).get("aws:SecureTransport"))
    resources = _listed(statement.get("Resource", []))
    covered = all(
        any(r == "*" or str(r).endswith(f":s3:::{target}") for r in resources)
        for target in (name, f"{name}/*")
    )
    return (
        statement.get("Effect") == "Deny"
        and everyone
        and any(a in ("s3:*", "*") for a in _listed(statement.get("Action", [])))
        and any(str(v).lower() == "false" for v in secure)
        and covered
    )


def _encryption_problems(answer: dict[str, Any]) -> list[str]:
    rules = answer["ServerSideEncryptionConfiguration"]["Rules"]
    algorithms = [r.get("ApplyServerSideEncryptionByDefault", {}).get("SSEAlgorithm") for r in rules]
    if any(a in ENCRYPTING_ALGORITHMS for a in algorithms):
        return []
    return [f"default encryption is {algorithms or 'not set'}"]


def _public_access_problems(answer: dict[str, Any]) -> list[str]:
    settings = answer["PublicAccessBlockConfiguration"]
    off = [name for name in PUBLIC_ACCESS_SETTINGS if not settings.get(name)]
    return [f"Block Public Access off: {', '.join(off)}"] if off else []
