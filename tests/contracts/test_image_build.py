"""The in-region image build, read in the synthesized template against CodeBuild's and the
library's contract (tests/contracts/image_build.py): privileged only for Docker, a compute type
whose disk holds the image, limits that end the build before the custom resource stops waiting,
the base digest resolved by the buildspec's eval, the failure answered with a log link."""

from __future__ import annotations

import fnmatch
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.contracts import image_build
from tests.support import REPO, path_without_node, resources
from trainium_eks.images import image_build as facts
from trainium_eks.images.training_image import base_image


def _project(template):
    ((_, project),) = resources(template, "AWS::CodeBuild::Project").items()
    return project["Properties"]


def _buildspec(template) -> dict:
    return yaml.safe_load(_project(template)["Source"]["BuildSpec"])


def test_given_the_build_project_then_docker_needs_privileged_and_the_disk_holds_the_image_twice(
    training_json,
):
    env = _project(training_json)["Environment"]
    commands = [
        r["Properties"]["buildCommand"]
        for r in resources(training_json, "Custom::CDKContainerImageBuild").values()
    ]
    assert env["PrivilegedMode"] is True
    assert commands and all(c.startswith(image_build.PRIVILEGED_NEEDED_FOR) for c in commands)
    memory_gb, disk_gb = image_build.COMPUTE_TYPES[env["ComputeType"]]
    assert (
        disk_gb >= 2 * facts.TRAINING_IMAGE_GB + 20
    )  # the image pulled, exported, and the build's own files


def _commands(template, phase: str) -> list[str]:
    return _buildspec(template)["phases"][phase]["commands"]


def test_given_the_limits_then_the_build_ends_before_the_custom_resource_stops_waiting(training_json):
    project = _project(training_json)
    low, high = image_build.TIMEOUT_RANGE_MINUTES
    assert low <= project["TimeoutInMinutes"] <= high
    low, high = image_build.QUEUED_TIMEOUT_RANGE_MINUTES
    assert low <= project["QueuedTimeoutInMinutes"] <= high
    for build in resources(training_json, "Custom::CDKContainerImageBuild").values():
        wait = build["Properties"]["ServiceTimeout"]
        assert wait <= image_build.CUSTOM_RESOURCE_TIMEOUT_MAX_S
        used = image_build.HANDLER_TIMEOUT_S + 60 * (
            project["TimeoutInMinutes"] + project["QueuedTimeoutInMinutes"]
        )
        assert used < wait, (used, wait)
    assert facts.BUILD_MINUTES_ESTIMATE < project["TimeoutInMinutes"]


def test_given_a_failing_build_then_post_build_answers_failed_with_the_log_link(training_json):
    build = "\n".join(_commands(training_json, "build"))
    post = "\n".join(_commands(training_json, "post_build"))
    assert all(line in build for line in image_build.BUILDSPEC_BUILD_LINES)
    assert all(marker in post for marker in image_build.BUILDSPEC_POST_BUILD_MARKERS)


def test_given_each_image_then_its_base_digest_is_resolved_in_the_build_and_labelled(training_json):
    builds = {
        r["Properties"]["imageTag"].split("-")[0]: r["Properties"]["buildCommand"]
        for r in resources(training_json, "Custom::CDKContainerImageBuild").values()
    }
    for name, dockerfile in (("training", "Dockerfile"), ("tensorboard", "tensorboard.Dockerfile")):
        arg = image_build.BUILD_ARG_FORM.format(
            key=facts.BASE_DIGEST_ARG, value=facts.base_digest_command(base_image(dockerfile))
        )
        assert arg in builds[name]  # unquoted: the buildspec's eval runs the substitution
    assert any('eval "$buildCommand"' in line for line in _commands(training_json, "build"))


def test_given_the_build_logs_then_they_go_to_an_encrypted_group_with_retention(training_json):
    project = _project(training_json)
    group = project["LogsConfig"]["CloudWatchLogs"]
    assert group["Status"] == "ENABLED"
    ((group_id, log_group),) = [
        (lid, r)
        for lid, r in resources(training_json, "AWS::Logs::LogGroup").items()
        if {"Ref": lid} == group["GroupName"]
    ]
    assert log_group["Properties"]["RetentionInDays"] == 30 and "KmsKeyId" in log_group["Properties"]
    assert project["EncryptionKey"] == log_group["Properties"]["KmsKeyId"], group_id


def test_given_a_machine_without_docker_then_synth_leaves_no_image_asset(default_synth):
    # The session's synth ran on a PATH with make only (tests.support.path_without_node): no docker.
    assert shutil.which("docker", path=path_without_node()) is None
    for manifest in default_synth.outdir.glob("*.assets.json"):
        assert json.loads(manifest.read_text()).get("dockerImages", {}) == {}, manifest.name
    training_assets = json.loads((default_synth.outdir / "trn-bert-training.assets.json").read_text())
    zips = [f for f in training_assets["files"].values() if f["source"].get("packaging") == "zip"]
    assert len(zips) == 2  # the build context (one zip for both images) and the library's handler


def _run_build_phase(training_json, tmp_path, *, tag_exists: bool) -> list[str]:
    """The synthesized build phase, run by bash with stand-ins for aws, docker and unzip that
    record their arguments (``aws ecr describe-images`` answers as ECR would: 0, or 254 for
    ImageNotFoundException)."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir(parents=True)
    for tool in ("aws", "docker", "unzip"):
        exists_rc = 0 if tag_exists else 254
        answer = f'[ "$1 $2" = "ecr describe-images" ] && exit {exists_rc}' if tool == "aws" else ""
        (bin_dir / tool).write_text(f'#!/bin/bash\necho "{tool} $*" >> {calls}\n{answer}\nexit 0\n')
        (bin_dir / tool).chmod(0o755)
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "repositoryUri": "123456789012.dkr.ecr.us-west-2.amazonaws.com/trn-bert/training",
        "repositoryAuthUri": "123456789012.dkr.ecr.us-west-2.amazonaws.com",
        "repositoryRegion": "us-west-2",
        "imageTag": "training-0123456789abcdef",
        "sourceS3Url": "s3://assets/context.zip",
        "buildCommand": "docker buildx build --file Dockerfile .",
    }
    script = "set -e\n" + "\n".join(_commands(training_json, "build")) + "\n"
    proc = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return calls.read_text().splitlines() if calls.exists() else []


def test_given_a_tag_already_pushed_then_the_build_pushes_nothing_and_one_not_pushed_is_built(
    training_json, tmp_path
):
    # A rollback re-sends the previous build: its tag is in the (immutable) repository already.
    again = _run_build_phase(training_json, tmp_path / "again", tag_exists=True)
    assert again == [
        "aws ecr describe-images --region us-west-2 --repository-name trn-bert/training "
        "--image-ids imageTag=training-0123456789abcdef"
    ]
    fresh = _run_build_phase(training_json, tmp_path / "fresh", tag_exists=False)
    assert fresh[0] == again[0]
    assert "docker buildx build --file Dockerfile ." in fresh
    assert (
        fresh[-1]
        == "docker push 123456789012.dkr.ecr.us-west-2.amazonaws.com/trn-bert/training:training-0123456789abcdef"
    )


def _library_handler_source() -> str:
    """The library's start function, from the installed jsii package (what deploys)."""
    import tarfile
    from importlib import resources as package_files

    (archive,) = [
        f for f in package_files.files("cdklabs.deploy_time_build._jsii").iterdir() if f.name.endswith(".tgz")
    ]
    with tarfile.open(str(archive)) as tar:
        member = tar.extractfile(image_build.HANDLER_SOURCE)
        assert member is not None
        return member.read().decode()


def test_given_the_responder_then_it_reads_only_build_variables_the_library_passes_and_answers_known_fields():
    from trainium_eks.images import build_responder

    source = Path(build_responder.__file__).read_text()
    read = set(re.findall(r'env(?:\.get\(|\[)"(\w+)"', source))
    assert read == {"responseURL", "stackId", "requestId", "logicalResourceId", "imageTag"}
    passed = set(re.findall(r'name: "(\w+)"', _library_handler_source()))
    assert read <= passed, read - passed
    answered = set(re.findall(r'^\s+"(\w+)": ', source, re.M))
    assert answered and answered <= image_build.RESPONSE_FIELDS


def test_given_botocore_s_codebuild_model_then_the_build_statuses_and_the_batch_get_builds_parameter_are_codebuild_s():
    # botocore's service model is the API's own definition at the installed version: it must
    # agree with the API reference's list the responder's tests are written against.
    import botocore.session

    model = botocore.session.get_session().get_service_model("codebuild")
    assert set(model.shape_for("Build").members["buildStatus"].enum) == image_build.BUILD_STATUSES
    ids = model.operation_model("BatchGetBuilds").input_shape.members
    assert list(ids) == [image_build.BATCH_GET_BUILDS_PARAMETER]
    assert "IDs of the builds" in ids[image_build.BATCH_GET_BUILDS_PARAMETER].documentation


def test_given_the_library_s_post_build_then_its_last_command_is_the_answer(training_json):
    # The responder leaves a build whose POST_BUILD phase SUCCEEDED alone: that holds only while
    # the answer is what post_build ends with (a phase succeeds when its last command does).
    (last,) = _commands(training_json, "post_build")[-1:]
    assert last.rstrip().splitlines()[-1].strip() == image_build.POST_BUILD_ANSWER


#: Values of the pseudo parameters for evaluating the synthesized boundary in one account.
_ACCOUNT, _REGION = "123456789012", "us-west-2"
_PSEUDO = {"AWS::Partition": "aws", "AWS::Region": _REGION, "AWS::AccountId": _ACCOUNT}


def _resolved(value: Any) -> str:
    """A policy value as IAM sees it in the account: pseudo parameters resolved, ``Fn::Join``
    joined; a reference to a resource stays its JSON (it matches no literal ARN)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and value.get("Ref") in _PSEUDO:
        return _PSEUDO[value["Ref"]]
    if isinstance(value, dict) and "Fn::Join" in value:
        sep, parts = value["Fn::Join"]
        return sep.join(_resolved(p) for p in parts)
    return json.dumps(value, sort_keys=True)


def _allows(statements: list[dict], action: str, resource: str, context: dict[str, str]) -> bool:
    """Whether an Allow statement matches the request (actions and resources with IAM's ``*``;
    ``StringEquals``, the only condition operator the boundary uses)."""

    def as_list(v: Any) -> list:
        return v if isinstance(v, list) else [v]

    for st in statements:
        if st["Effect"] != "Allow" or not any(fnmatch.fnmatchcase(action, a) for a in as_list(st["Action"])):
            continue
        if not any(fnmatch.fnmatchcase(resource, _resolved(r)) for r in as_list(st["Resource"])):
            continue
        conditions = st.get("Condition", {})
        assert set(conditions) <= {"StringEquals"}, conditions
        equals = conditions.get("StringEquals", {})
        if all(context.get(key) in [_resolved(v) for v in as_list(vs)] for key, vs in equals.items()):
            return True
    return False


def _bootstrap_template() -> dict:
    path = REPO / image_build.BOOTSTRAP_TEMPLATE
    installed = json.loads((REPO / "node_modules/aws-cdk/package.json").read_text())["version"]
    assert installed == image_build.CDK_CLI_VERSION, installed
    return yaml.safe_load(path.read_text())


def test_given_the_bootstrap_bucket_s_encryption_then_the_build_role_s_boundary_lets_s3_decrypt_the_context(
    training_json,
):
    # Given the asset bucket of the pinned CLI's bootstrap template: SSE-KMS with the aws/s3 key
    # (the CLI's default), a key the template makes or a key given by ID, all of them used by S3
    # on the reader's behalf, whose kms:Decrypt the key policies grant the account via S3
    bootstrap = _bootstrap_template()
    (rule,) = bootstrap["Resources"]["StagingBucket"]["Properties"]["BucketEncryption"][
        "ServerSideEncryptionConfiguration"
    ]
    default = rule["ServerSideEncryptionByDefault"]
    assert default["SSEAlgorithm"] == "aws:kms"
    assert default["KMSMasterKeyID"] == {
        "Fn::If": [
            "CreateNewKey",
            {"Fn::Sub": "${FileAssetsBucketEncryptionKey.Arn}"},
            {
                "Fn::If": [
                    "UseAwsManagedKey",
                    {"Ref": "AWS::NoValue"},
                    {"Fn::Sub": "${FileAssetsBucketKmsKeyId}"},
                ]
            },
        ]
    }
    key_policy = bootstrap["Resources"]["FileAssetsBucketEncryptionKey"]["Properties"]["KeyPolicy"]
    (via_s3,) = [
        st["Condition"]["StringEquals"]["kms:ViaService"]
        for st in key_policy["Statement"]
        if st["Principal"] == {"AWS": "*"} and "kms:Decrypt" in st["Action"]
    ]
    (via_s3_sub,) = [v["Fn::Sub"] for v in via_s3]
    via_service = via_s3_sub.replace("${AWS::Region}", _REGION)
    # When S3 decrypts the context for the build role (a key of the account and region: the
    # aws/s3 key's ID is the account's own)
    ((_, boundary),) = [
        (lid, r)
        for lid, r in resources(training_json, "AWS::IAM::ManagedPolicy").items()
        if "BuildBoundary" in lid
    ]
    statements = boundary["Properties"]["PolicyDocument"]["Statement"]
    key = f"arn:aws:kms:{_REGION}:{_ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    # Then the boundary allows it, and only through S3, in this account and region
    assert _allows(statements, "kms:Decrypt", key, {"kms:ViaService": via_service})
    assert not _allows(statements, "kms:Decrypt", key, {})  # a direct call
    assert not _allows(statements, "kms:Decrypt", key, {"kms:ViaService": f"ec2.{_REGION}.amazonaws.com"})
    other_account = key.replace(_ACCOUNT, "210987654321")
    assert not _allows(statements, "kms:Decrypt", other_account, {"kms:ViaService": via_service})
    assert not _allows(statements, "kms:Encrypt", key, {"kms:ViaService": via_service})
