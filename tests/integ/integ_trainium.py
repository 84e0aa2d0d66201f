"""Integration test app (aws-cdk-integ-tests-alpha): the small variant deployed, asserted, destroyed.

Test cases: the app's two stacks as ``app.py`` builds them (:mod:`tests.integ.variant`'s
configuration) and the probe stack (:mod:`tests.integ.probe_stack`). The assertion invokes the
probe function once a minute until its answer is :func:`~tests.integ.probe.handler.expected_verdict`
or 55 minutes pass (a custom resource must answer CloudFormation within an hour). Every resource
is deleted with its stack (the library retains FSx, ECR, keys and logs; a test deployment must
not). ``make integ`` deploys it (:mod:`tests.integ.run`); ``make test`` compares its templates with
the committed snapshot (:mod:`tests.integ.snapshot`).

Run as ``python -m tests.integ.integ_trainium`` from the repository root (the CDK CLI's ``--app``).
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ecr as ecr
from aws_cdk.integ_tests_alpha import ExpectedResult, IntegTest, Match

from app import instantiate_stacks
from stacks import TrainingStack, TrainiumPlatformStack
from tests.integ.efa_logging import log_collectives
from tests.integ.probe.handler import expected_verdict
from tests.integ.probe_stack import ProbeStack
from tests.integ.variant import integ_config

#: The assertion waits this long for the run, polling at INTERVAL.
TOTAL_TIMEOUT = cdk.Duration.minutes(55)
INTERVAL = cdk.Duration.minutes(1)


def build(app: cdk.App) -> IntegTest:
    """The integ test of ``app``'s context (cdk.json plus ``-c``), on :mod:`.variant`'s platform."""
    config = integ_config(app.node.get_all_context())
    platform, training = instantiate_stacks(app, config)
    assert isinstance(platform, TrainiumPlatformStack) and isinstance(training, TrainingStack)
    log_collectives(training.workload.job)
    probe = ProbeStack(
        app, f"{config.name_prefix}-probe", platform=platform.platform, training=training, config=config
    )
    for stack in (platform, training, probe):
        cdk.RemovalPolicies.of(stack).destroy()
    repository = platform.platform.registry.repository.node.default_child
    assert isinstance(repository, ecr.CfnRepository)
    repository.empty_on_delete = True
    integ = IntegTest(
        app,
        "TrainiumAcceptance",
        test_cases=[platform, training, probe],
        # The probe function is invoked by name: the assertions live in the platform's region.
        assertion_stack=cdk.Stack(
            app, f"{config.name_prefix}-assert", env=cdk.Environment(region=config.region)
        ),
        regions=[config.region],
        stack_update_workflow=False,
        diff_assets=False,
    )
    integ.assertions.invoke_function(function_name=probe.function.function_name).expect(
        ExpectedResult.object_like({"Payload": Match.serialized_json(expected_verdict(probe.nodes))})
    ).wait_for_assertions(total_timeout=TOTAL_TIMEOUT, interval=INTERVAL)
    return integ


def main() -> None:
    app = cdk.App()
    build(app)
    app.synth()


if __name__ == "__main__":
    main()
