"""The bootstrap version the pinned aws-cdk-lib needs, and the account's."""

from __future__ import annotations

import json

from tests.support import Synth
from tests.trainium_eks.doctor.stubs import REQUIREMENT, aws_with, bootstrap_call, target
from trainium_eks.doctor.bootstrap import bootstrap_stack
from trainium_eks.doctor.findings import Status
from trainium_eks.doctor.requirement import bootstrap_requirement


def test_given_the_app_when_its_requirement_is_probed_then_it_is_what_its_cloud_assembly_asks(
    default_synth: Synth,
):
    manifest = json.loads((default_synth.outdir / "manifest.json").read_text())
    stacks = [
        a["properties"] for a in manifest["artifacts"].values() if a["type"] == "aws:cloudformation:stack"
    ]
    probed = bootstrap_requirement("us-west-2", {})
    assert {s["requiresBootstrapStackVersion"] for s in stacks} == {probed.version}
    assert {s["bootstrapStackVersionSsmParameter"] for s in stacks} == {probed.parameter}


def test_given_a_custom_qualifier_in_context_when_probed_then_its_parameter_is_read():
    probed = bootstrap_requirement("us-west-2", {"@aws-cdk/core:bootstrapQualifier": "trnbert01"})
    assert probed.parameter == "/cdk-bootstrap/trnbert01/version"


def test_given_a_current_bootstrap_when_checked_then_ok():
    aws = aws_with([bootstrap_call("30")])
    verdict = bootstrap_stack(target(aws))
    aws.assert_all_asked()
    assert verdict == (Status.OK, "bootstrap version 30; aws-cdk-lib 2.275.0 needs 6 or newer", "")


def test_given_an_old_bootstrap_when_checked_then_fail_with_the_bootstrap_command():
    verdict = bootstrap_stack(target(aws_with([bootstrap_call("5")])))
    assert verdict.status is Status.FAIL
    assert (
        verdict.fix
        == "run `npx cdk bootstrap aws://123456789012/us-west-2` (updates the CDKToolkit stack in place)"
    )


def test_given_no_bootstrap_when_checked_then_fail():
    aws = aws_with([bootstrap_call().failing("ParameterNotFound", 400)])
    verdict = bootstrap_stack(target(aws))
    assert verdict.status is Status.FAIL
    assert REQUIREMENT.parameter in verdict.found
