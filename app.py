#!/usr/bin/env python3
"""CDK app: read the configuration from context, build the stacks, synthesize."""

import sys

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from stacks import TrainiumPlatformStack
from trainium_eks.config import ConfigError, config_from_context
from trainium_eks.review import platform_review


def main() -> int:
    app = cdk.App()
    try:
        config = config_from_context(app.node.get_all_context())
        TrainiumPlatformStack(app, "TrainiumPlatform", config=config)
    except ConfigError as err:
        # One line for the user; nothing has been written to cdk.out yet.
        print(f"error: {err}", file=sys.stderr)
        return 2
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    print(platform_review(config), file=sys.stderr)
    app.synth()
    return 0


if __name__ == "__main__":
    sys.exit(main())
