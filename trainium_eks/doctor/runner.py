"""The doctor's runner: every check once, one line each, a non-zero exit on any blocker."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from botocore.exceptions import BotoCoreError, ClientError

from trainium_job.errors import ConfigError

from ..config import PlatformConfig
from . import account, capacity, deployed, sources
from .aws import BotoClients, Clients, UnknownProfile, finding_from_error
from .bootstrap import bootstrap_stack
from .check_list import Http, urllib_http
from .findings import Finding, Status, Verdict, blockers, summary
from .requirement import BootstrapRequirement, bootstrap_requirement
from .settings import load_config, parse_overrides, read_context
from .target import Target


@dataclass(frozen=True)
class Check:
    """A named check: a function of the :class:`Target` that returns a :class:`Verdict`."""

    name: str
    run: Callable[[Target], Verdict]


#: Every check, in the order of the report (the order a deployment meets them).
CHECKS: tuple[Check, ...] = (
    Check("bootstrap", bootstrap_stack),
    Check("kubernetes-version", sources.kubernetes_version),
    Check("vpc-quota", account.vpc_quota),
    Check("eip-quota", account.eip_quota),
    Check("system-offering", capacity.system_offering),
    Check("instance-offering", capacity.instance_offering),
    Check("dataset-offering", capacity.dataset_offering),
    Check("trn-quota", capacity.trn_quota),
    Check("capacity-reservation", capacity.capacity_reservation),
    Check("base-image", sources.base_image),
    Check("dataset-source", sources.dataset_source),
    Check("phase2-dataset-source", sources.phase2_dataset_source),
    Check("phase2-start", sources.phase2_start),
    Check("heldout-source", sources.heldout_source),
    Check("model-bucket", deployed.model_bucket),
)
#: The check that gates the others: without an identity no other call can succeed.
IDENTITY_CHECK = "credentials"


def identity(aws: Clients) -> tuple[Finding, str | None]:
    """Who the credentials are (no permission needed), and the account ID when they work."""
    try:
        answer = aws.client("sts").get_caller_identity()
    except (ClientError, BotoCoreError) as err:
        # Nothing else can be checked: whatever the reason, that blocks.
        finding = finding_from_error(IDENTITY_CHECK, err)
        return dataclasses.replace(finding, status=Status.FAIL), None
    return Finding(Status.OK, IDENTITY_CHECK, f"account {answer['Account']} as {answer['Arn']}"), answer[
        "Account"
    ]


def run_checks(
    config: PlatformConfig,
    aws: Clients,
    *,
    bootstrap: Callable[[], BootstrapRequirement],
    http: Http = urllib_http,
    checks: Sequence[Check] = CHECKS,
) -> list[Finding]:
    """The findings of every check; AWS errors become lines (:func:`~.aws.finding_from_error`)."""
    gate, account_id = identity(aws)
    if account_id is None:
        return [gate]
    target = Target(config=config, aws=aws, account=account_id, bootstrap=bootstrap(), http=http)
    findings = [gate]
    for check in checks:
        try:
            findings.append(Finding.of(check.name, check.run(target)))
        except (ClientError, BotoCoreError) as err:
            findings.append(finding_from_error(check.name, err))
    return findings


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m trainium_eks.doctor",
        description="Read-only checks that the AWS account can hold the platform as configured "
        "(cdk.json context plus -c overrides). Creates nothing. Exit 1 on any FAIL line.",
    )
    parser.add_argument(
        "-c", "--context", action="append", default=[], metavar="KEY=VALUE", help="override a context key"
    )
    parser.add_argument("--profile", default=None, help="AWS profile (default: boto3's credential chain)")
    parser.add_argument("--app-dir", type=Path, default=Path("."), help="directory of cdk.json (default: .)")
    return parser.parse_args(argv)


def main(
    argv: Sequence[str] | None = None,
    *,
    out: TextIO = sys.stdout,
    aws: Clients | None = None,
    bootstrap: Callable[[], BootstrapRequirement] | None = None,
    http: Http = urllib_http,
) -> int:
    """Print one line per check and a summary; 0 without blockers, 1 with, 2 on a bad configuration.

    ``aws``, ``bootstrap`` and ``http`` replace boto3, the bootstrap probe and urllib (tests).
    """
    args = parse_args(argv)
    context = read_context(args.app_dir)
    try:
        context.update(parse_overrides(args.context))
        config = load_config(context)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        clients = aws or BotoClients(region=config.region, profile=args.profile)
    except UnknownProfile as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(
        f"Checking {config.region} ({config.trainium_az_id}) for {config.desired_nodes} x "
        f"{config.instance_type}, Kubernetes {config.kubernetes_version} (read-only)",
        file=out,
    )
    findings = run_checks(
        config,
        clients,
        bootstrap=bootstrap or (lambda: bootstrap_requirement(config.region, context)),
        http=http,
    )
    for finding in findings:
        print(finding.line, file=out)
    print(summary(findings), file=out)
    return 1 if blockers(findings) else 0
