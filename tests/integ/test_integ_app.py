"""What the integ app deploys and asserts (read from its committed snapshot, which
test_snapshot keeps equal to a fresh synth), and its one change to the library's job."""

from __future__ import annotations

import json
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template

from tests.integ.efa_logging import COLLECTIVES_LOGGING
from tests.integ.integ_trainium import build
from tests.integ.probe.handler import expected_verdict
from tests.integ.snapshot import SNAPSHOT
from tests.integ.variant import integ_context
from tests.support import REPO, k8s_manifests, submitted_jobs, synth_training
from trainium_eks.doctor.settings import read_context
from trainium_job.submission import MANIFEST_KEY

TEST_STACKS = ("trn-integ-platform", "trn-integ-training", "trn-integ-probe")


def saved(name: str) -> dict[str, Any]:
    return json.loads((SNAPSHOT / name).read_text())


def test_given_the_integ_manifest_then_it_deploys_the_three_stacks_and_asserts_in_their_region():
    (case,) = saved("integ.json")["testCases"].values()
    assert case["stacks"] == list(TEST_STACKS)
    assert (case["regions"], case["assertionStack"], case["stackUpdateWorkflow"]) == (
        ["us-west-2"],
        "trn-integ-assert",
        False,
    )


@pytest.mark.parametrize("stack", TEST_STACKS)
def test_given_a_test_stack_then_destroy_deletes_every_resource(stack):
    resources = saved(f"{stack}.template.json")["Resources"].values()
    assert {r.get("DeletionPolicy") for r in resources if r["Type"] != "AWS::CDK::Metadata"} == {"Delete"}


def test_given_the_registry_then_its_images_go_with_it():
    (repository,) = [
        r
        for r in saved("trn-integ-platform.template.json")["Resources"].values()
        if r["Type"] == "AWS::ECR::Repository"
    ]
    assert repository["Properties"]["EmptyOnDelete"] is True


def test_given_the_assertion_then_it_waits_for_exactly_the_expected_verdict():
    (call,) = [
        r["Properties"]
        for r in saved("trn-integ-assert.template.json")["Resources"].values()
        if r["Type"] == "Custom::DeployAssert@SdkCallLambdainvoke"
    ]
    assert json.loads(call["expected"]) == {
        "$ObjectLike": {"Payload": {"$SerializedJson": expected_verdict(2)}}
    }
    assert call["stateMachineArn"]  # waitForAssertions: polled by a state machine


@pytest.fixture(scope="module")
def training_manifests() -> tuple[dict[str, Any], dict[str, Any]]:
    """The Volcano Job as the library applies it, and as the integ app does."""
    context = {k: str(v) for k, v in integ_context({}).items() if isinstance(v, (str, int))}
    library = synth_training(**context)
    integ = build(cdk.App(context=read_context(REPO)))
    (training,) = [
        s
        for s in integ.node.scope.node.children
        if isinstance(s, cdk.Stack) and s.stack_name == "trn-integ-training"
    ]

    def job(template: dict[str, Any]) -> dict[str, Any]:
        (found,) = submitted_jobs(template)
        return found

    integ_template = Template.from_stack(training).to_json()
    # The overridden ConfigMap keeps the prune label aws_eks_v2 gives every object it applies.
    (config_map,) = [
        o for _, o in k8s_manifests(integ_template) if o["kind"] == "ConfigMap" and MANIFEST_KEY in o["data"]
    ]
    assert any(k.startswith("aws.cdk.eks/prune-") for k in config_map["metadata"]["labels"])
    return job(library), job(integ_template)


def test_given_the_integ_job_then_it_is_the_library_job_with_collectives_logging_only(training_manifests):
    library, integ = training_manifests
    (container,) = integ["spec"]["tasks"][0]["template"]["spec"]["containers"]
    added = container["env"][-len(COLLECTIVES_LOGGING) :]
    assert added == [{"name": k, "value": v} for k, v in COLLECTIVES_LOGGING.items()]
    container["env"] = container["env"][: -len(COLLECTIVES_LOGGING)]
    assert integ == library


def test_given_the_probe_then_it_reads_the_pods_and_container_the_job_names(training_manifests):
    _, integ = training_manifests
    task = integ["spec"]["tasks"][0]
    (fn,) = [
        r
        for r in saved("trn-integ-probe.template.json")["Resources"].values()
        if r["Type"] == "AWS::Lambda::Function"
    ]
    variables = fn["Properties"]["Environment"]["Variables"]
    assert (variables["TASK_NAME"], variables["CONTAINER"]) == (
        task["name"],
        task["template"]["spec"]["containers"][0]["name"],
    )
