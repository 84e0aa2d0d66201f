"""The CDK bootstrap stack: does the account's meet what the pinned aws-cdk-lib needs
(:mod:`.requirement`)?"""

from __future__ import annotations

from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from .aws import error_code
from .findings import Status, Verdict

if TYPE_CHECKING:
    from .target import Target


def bootstrap_stack(t: Target) -> Verdict:
    """The bootstrap version in SSM (what ``cdk deploy`` reads) against the requirement."""
    need = t.bootstrap
    bootstrap = f"npx cdk bootstrap {t.environment}"
    try:
        answer = t.aws.client("ssm").get_parameter(Name=need.parameter)
    except ClientError as err:
        if error_code(err) != "ParameterNotFound":
            raise
        return Verdict(
            Status.FAIL,
            f"{t.environment} is not bootstrapped ({need.parameter} does not exist)",
            f"run `{bootstrap}` (creates the CDKToolkit stack)",
        )
    have = int(answer["Parameter"]["Value"])
    found = f"bootstrap version {have}; aws-cdk-lib {need.library} needs {need.version} or newer"
    if have < need.version:
        return Verdict(Status.FAIL, found, f"run `{bootstrap}` (updates the CDKToolkit stack in place)")
    return Verdict(Status.OK, found)
