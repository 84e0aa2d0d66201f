"""The default app's two stacks: the workload deploys, changes and goes away without the platform."""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator
from typing import Any

import aws_cdk as cdk
import pytest

from app import instantiate_stacks
from tests.support import (
    PLATFORM_STACK,
    REPO,
    TRAINING_STACK,
    k8s_manifests,
    make_cdk,
    resources,
    submitted_jobs,
    synth_platform,
    synth_training,
)
from trainium_eks.config import config_from_context

#: Contexts that change only the workload: none may change the platform's template.
WORKLOAD_ONLY_CHANGES = (
    {"training_max_steps": "5000"},
    {"training_run_name": "trial", "training_model": "base", "training_cache_set": "bert-base-seq128"},
    {"training_rdzv_backend": "etcd"},
    {"preparation_enabled": "true", "training_phases": "1"},
    {"training_enabled": "false"},
)


def _stack_outputs_read(value: Any) -> Iterator[dict[str, str]]:
    if isinstance(value, dict):
        if "Fn::GetStackOutput" in value:
            yield value["Fn::GetStackOutput"]
        for item in value.values():
            yield from _stack_outputs_read(item)
    elif isinstance(value, list):
        for item in value:
            yield from _stack_outputs_read(item)


def test_given_default_app_then_two_stacks_named_after_the_prefix_and_training_after_platform(default_synth):
    manifest = json.loads((default_synth.outdir / "manifest.json").read_text())
    stacks = {k: v for k, v in manifest["artifacts"].items() if v["type"] == "aws:cloudformation:stack"}
    assert set(stacks) == {PLATFORM_STACK, TRAINING_STACK}
    # The manifest names a stack only where its name differs from its ID: here none does.
    assert stacks[PLATFORM_STACK]["properties"].get("stackName", PLATFORM_STACK) == "trn-bert-platform"
    assert stacks[TRAINING_STACK]["properties"].get("stackName", TRAINING_STACK) == "trn-bert-training"
    assert PLATFORM_STACK in stacks[TRAINING_STACK]["dependencies"]
    assert TRAINING_STACK not in stacks[PLATFORM_STACK].get("dependencies", [])


def test_given_default_app_then_the_workload_is_only_in_the_training_stack(platform_json, training_json):
    def kinds(template: dict[str, Any]) -> set[str]:
        return {obj["kind"] for _, obj in k8s_manifests(template)}

    assert {"Job", "Deployment", "ServiceAccount"} <= kinds(training_json)
    assert not {"Job", "Deployment", "ServiceAccount"} & kinds(platform_json)
    assert not resources(platform_json, "Custom::CDKContainerImageBuild")
    assert len(resources(training_json, "Custom::CDKContainerImageBuild")) == 2
    assert {"Rank0Logs", "JobStatus", "NeuronTop"} <= set(training_json["Outputs"])
    assert not {"Rank0Logs", "JobStatus", "NeuronTop"} & set(platform_json["Outputs"])


def test_given_training_stack_then_it_reads_only_outputs_the_platform_declares(platform_json, training_json):
    reads = list(_stack_outputs_read(training_json))
    assert {r["OutputName"] for r in reads} == {
        "WorkloadClusterName",
        "WorkloadKubectlServiceToken",
        "WorkloadRepositoryName",
        "WorkloadModelBucketName",
    }
    for read in reads:
        assert read["StackName"] == "trn-bert-platform" and read["Region"] == "us-west-2"
        assert read["OutputName"] in platform_json["Outputs"]
    # No CloudFormation export ties the stacks: none can be "in use" when the platform changes.
    assert "Fn::ImportValue" not in json.dumps(training_json)
    assert not [o for o in platform_json["Outputs"].values() if "Export" in o]


def test_given_platform_outputs_then_they_name_the_cluster_provider_repository_and_model_bucket(
    platform_json,
):
    outputs = platform_json["Outputs"]
    (cluster_id,) = resources(platform_json, "AWS::EKS::Cluster")
    (repo_id,) = resources(platform_json, "AWS::ECR::Repository")
    assert outputs["WorkloadClusterName"]["Value"] == {"Ref": cluster_id}
    assert outputs["WorkloadRepositoryName"]["Value"] == {"Ref": repo_id}
    (bucket_id,) = [i for i in resources(platform_json, "AWS::S3::Bucket") if i.startswith("ModelBucket")]
    assert outputs["WorkloadModelBucketName"]["Value"] == {"Ref": bucket_id}
    provider = outputs["WorkloadKubectlServiceToken"]["Value"]["Fn::GetAtt"]
    assert platform_json["Resources"][provider[0]]["Type"] == "AWS::Lambda::Function" and provider[1] == "Arn"


@pytest.mark.parametrize("context", WORKLOAD_ONLY_CHANGES, ids=lambda c: ",".join(c))
def test_given_a_workload_only_change_then_the_platform_template_is_unchanged(context):
    # So `cdk deploy <prefix>-training --exclusively` is all such a change needs.
    assert synth_platform(**context) == synth_platform()


def test_given_a_job_change_then_the_training_stack_gets_a_new_job():
    def job_names(template: dict[str, Any]) -> set[str]:
        return {job["metadata"]["name"] for job in submitted_jobs(template)}

    (before,) = job_names(synth_training())
    (after,) = job_names(synth_training(training_max_steps="5000"))
    assert before != after and before.startswith("trn-bert-") and after.startswith("trn-bert-")


def test_given_training_disabled_then_the_app_has_only_the_platform_stack():
    stacks = instantiate_stacks(cdk.App(), config_from_context({"training_enabled": "false"}))
    assert [s.stack_name for s in stacks] == ["trn-bert-platform"]


def test_given_another_prefix_then_the_stack_ids_and_names_follow_it():
    stacks = instantiate_stacks(cdk.App(), config_from_context({"name_prefix": "exp"}))
    assert [(s.node.id, s.stack_name) for s in stacks] == [
        ("exp-platform", "exp-platform"),
        ("exp-training", "exp-training"),
    ]


def test_given_the_cli_then_the_training_stack_is_selected_alone_by_its_name(default_synth):
    # What `cdk deploy trn-bert-training --exclusively` selects: that stack, not its dependency.
    proc = make_cdk(["synth", TRAINING_STACK, "--exclusively", "-a", str(default_synth.outdir), "--json"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    shown, training = json.loads(proc.stdout), default_synth.templates[TRAINING_STACK]
    assert (shown["Resources"], shown["Outputs"]) == (training["Resources"], training["Outputs"])


def test_given_stacks_and_app_then_they_import_only_the_package_root():
    for path in [REPO / "app.py", *sorted((REPO / "stacks").glob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("trainium_eks"):
                assert node.module == "trainium_eks", f"{path.name} imports {node.module}"
            if isinstance(node, ast.Import):
                assert not [a.name for a in node.names if a.name.startswith("trainium_eks.")], path.name
