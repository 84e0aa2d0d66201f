"""What the pinned aws-cdk-lib needs of the CDK bootstrap stack (read from a synthesized probe)."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import Any


@dataclass(frozen=True)
class BootstrapRequirement:
    """The bootstrap version a deployment needs and the SSM parameter the CLI reads it from.

    Attributes:
        version: ``requiresBootstrapStackVersion`` of a stack synthesized by the pinned aws-cdk-lib.
        parameter: ``bootstrapStackVersionSsmParameter`` (``/cdk-bootstrap/<qualifier>/version``).
        library: the aws-cdk-lib version that needs it.
    """

    version: int
    parameter: str
    library: str


def bootstrap_requirement(region: str, context: Mapping[str, Any]) -> BootstrapRequirement:
    """Synthesize an empty stack the way the app's stacks are (region, no account, the app's
    context, so a custom ``@aws-cdk/core:bootstrapQualifier`` counts) and read what its cloud
    assembly asks of the bootstrap stack. Nothing is written outside a temporary directory."""
    import aws_cdk as cdk  # jsii starts Node: only when the doctor runs, not on import

    with tempfile.TemporaryDirectory() as outdir:
        app = cdk.App(outdir=outdir, context=dict(context))
        stack = cdk.Stack(app, "BootstrapProbe", env=cdk.Environment(region=region))
        # One resource that costs nothing: template validation refuses an empty stack.
        cdk.CfnWaitConditionHandle(stack, "Probe")
        artifact = app.synth().get_stack_artifact("BootstrapProbe")
        version = artifact.requires_bootstrap_stack_version
        parameter = artifact.bootstrap_stack_version_ssm_parameter
    return BootstrapRequirement(
        version=int(version or 0),
        parameter=str(parameter or "/cdk-bootstrap/hnb659fds/version"),
        library=metadata.version("aws-cdk-lib"),
    )
