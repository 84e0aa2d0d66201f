#!/usr/bin/env python3
"""CDK app: read the configuration from context, build the stacks, synthesize."""

import os
import shutil
import sys
from pathlib import Path

import aws_cdk as cdk

from stacks import TrainingStack, TrainiumPlatformStack
from trainium_eks import (
    ConfigError,
    PlatformConfig,
    StaleAcknowledgement,
    check_acknowledgements,
    config_from_context,
    nag_plugins,
    platform_review,
    platform_stack_name,
    training_stack_name,
)

#: What a cloud assembly consists of (the CLI's lock files are left alone).
ASSEMBLY_PATTERNS = (
    "manifest.json",
    "tree.json",
    "cdk.out",
    "*.template.json",
    "*.assets.json",
    "*.metadata.json",
    # aws-cdk-lib's validation report (validation-report.json; policy-validation-report.json
    # with @aws-cdk/core:validationReportJson), written whenever the app has validation plugins
    "*validation-report.json",
    "asset.*",
)


def remove_stale_assembly(outdir: str) -> None:
    """Delete a previous assembly in ``outdir`` so a failed synth leaves nothing to misread.

    Only a directory that holds an assembly (a ``manifest.json``) is touched: the CLI's
    ``--output`` may point anywhere.
    """
    out = Path(outdir)
    if not (out / "manifest.json").is_file():
        return
    for pattern in ASSEMBLY_PATTERNS:
        for path in out.glob(pattern):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


def instantiate_stacks(app: cdk.App, config: PlatformConfig) -> list[cdk.Stack]:
    """The platform stack and, when ``training_enabled``, the training stack on it."""
    # The CLI selects stacks by construct ID, so each stack's ID is its name (`cdk deploy
    # <prefix>-platform`, `cdk deploy <prefix>-training --exclusively`). A stack's construct ID is
    # not part of its resources' logical IDs.
    platform = TrainiumPlatformStack(app, platform_stack_name(config.name_prefix), config=config)
    if not config.training_enabled:
        return [platform]
    training = TrainingStack(
        app, training_stack_name(config.name_prefix), platform=platform.platform, config=config
    )
    return [platform, training]


def main() -> int:
    app = cdk.App()
    try:
        config = config_from_context(app.node.get_all_context())
        instantiate_stacks(app, config)
    except (ConfigError, StaleAcknowledgement) as err:
        # One line for the user; the CLI's output directory must not keep an older assembly.
        print(f"error: {err}", file=sys.stderr)
        remove_stale_assembly(os.environ.get("CDK_OUTDIR") or app.outdir)
        return 2
    # AwsSolutions and the platform's pack; their report then settles every acknowledgement.
    cdk.Validations.of(app).add_plugins(*nag_plugins(app))
    print(platform_review(config), file=sys.stderr)
    assembly = app.synth()
    try:
        check_acknowledgements(app, assembly.directory)
    except StaleAcknowledgement as err:
        print(f"error: {err}", file=sys.stderr)
        remove_stale_assembly(assembly.directory)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
