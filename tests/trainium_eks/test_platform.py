"""TrainiumPlatform and TrainingWorkload composed in a user's own stack, under IDs of its choosing."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template

from tests.support import k8s_manifests, resources
from trainium_eks import ConfigError, TrainingWorkload, TrainiumPlatform, config_from_context

SETTINGS = {"training_rdzv_backend": "etcd", "name_prefix": "mine"}


@pytest.fixture(scope="module")
def composed() -> tuple[cdk.Stack, TrainiumPlatform, TrainingWorkload, dict[str, Any]]:
    app = cdk.App()
    stack = cdk.Stack(app, "Mine", env=cdk.Environment(region="us-west-2"))
    config = config_from_context(SETTINGS)
    platform = TrainiumPlatform(stack, "Platform", config=config)
    workload = TrainingWorkload(stack, "Bert", target=platform.workload_target, config=config)
    return stack, platform, workload, Template.from_stack(stack).to_json()


def _logical_id(stack: cdk.Stack, construct: Any) -> str:
    return str(stack.resolve(construct.node.default_child.logical_id))


def test_given_another_construct_id_then_the_platform_builds_and_its_ids_carry_it(composed):
    # Its cdk-nag acknowledgements name logical IDs relative to the platform, whatever its ID.
    stack, platform, _, template = composed
    (file_system,) = resources(template, "AWS::FSx::FileSystem")
    assert file_system.startswith("PlatformStorageFileSystem")
    assert _logical_id(stack, platform.registry.repository).startswith("PlatformRegistryRepository")


def test_given_one_stack_then_the_job_is_applied_after_volcano_the_claim_etcd_and_the_images(composed):
    _, _, workload, template = composed
    # The job's submitter (which creates the Volcano Job) comes after them.
    (job_id,) = [
        lid
        for lid, obj in k8s_manifests(template)
        if obj["kind"] == "Job" and obj["metadata"]["labels"].get("app.kubernetes.io/name") == "job-submitter"
    ]
    depends = set(template["Resources"][job_id]["DependsOn"])
    for prefix in (
        "PlatformAddonsVolcanoChart",
        "PlatformAddonsVolcanoTrainingQueue",
        "PlatformStorageVolume",
        "PlatformAddonsEtcd",
        "BertTrainingImagesTrainingBuild",
        "BertTrainingImagesTensorboardBuild",
    ):
        assert any(d.startswith(prefix) for d in depends), (prefix, sorted(depends))
    (tensorboard_id,) = {
        lid
        for lid, obj in k8s_manifests(template)
        if obj["kind"] == "Deployment" and obj["metadata"]["name"] == "tensorboard"
    }
    tensorboard_depends = template["Resources"][tensorboard_id]["DependsOn"]
    assert not any(d.startswith(("PlatformAddonsVolcano", "PlatformAddonsEtcd")) for d in tensorboard_depends)
    assert any(d.startswith("PlatformStorageVolume") for d in tensorboard_depends)


def test_given_one_stack_then_the_platform_outputs_are_there_and_nothing_is_read_from_another_stack(composed):
    _, _, _, template = composed
    outputs = sorted(o for o in template["Outputs"] if o.startswith("PlatformWorkload"))
    assert [o[len("PlatformWorkload") :][:-8] for o in outputs] == [
        "ClusterName",
        "KubectlServiceToken",
        "ModelBucketName",
        "RepositoryName",
    ]
    assert "Fn::GetStackOutput" not in str(template)


def test_given_a_workload_in_another_stack_then_its_target_is_imported_and_that_stack_follows(composed):
    stack, platform, _, _ = composed
    other = cdk.Stack(stack.node.scope, "Other", env=cdk.Environment(region="us-west-2"))
    target = platform.workload_target_in(other)
    assert stack in other.node.dependencies  # a stack dependency once synthesized
    assert cdk.Stack.of(target.cluster) is other and cdk.Stack.of(target.repository) is other
    assert (target.namespace, target.claim_name, target.queue_name) == ("training", "fsx-claim", "training")
    assert target.etcd_endpoint == platform.workload_target.etcd_endpoint
    assert not target.claim_dependencies and not target.queue_dependencies and not target.etcd_dependencies
    read = other.resolve(target.cluster.cluster_name)["Fn::GetStackOutput"]
    assert read["StackName"] == stack.stack_name and read["OutputName"].startswith(
        "PlatformWorkloadClusterName"
    )
    # The model bucket's name, read the same way (the bucket stays the platform's).
    bucket = other.resolve(target.model_bucket_name)["Fn::GetStackOutput"]
    assert bucket["StackName"] == stack.stack_name and bucket["OutputName"].startswith(
        "PlatformWorkloadModelBucketName"
    )
    assert platform.workload_target_in(stack) == platform.workload_target
    assert platform.workload_target.model_bucket_name == platform.model_bucket.bucket_name


def test_given_a_workload_stack_in_another_region_then_one_line_names_the_platform_environment(composed):
    stack, platform, _, _ = composed
    elsewhere = cdk.Stack(stack.node.scope, "Elsewhere", env=cdk.Environment(region="us-east-1"))
    with pytest.raises(
        ConfigError, match=r"'region' = 'us-east-1' is invalid: .*\(aws://unknown-account/us-west-2\)"
    ):
        platform.workload_target_in(elsewhere)
