"""Kubernetes version in EKS, the base image in its registry, the dataset readable without signing."""

from __future__ import annotations

import urllib.error

import pytest

from tests.trainium_eks.doctor.stubs import (
    DIGEST,
    RegistryAnswers,
    aws_with,
    cluster_versions_call,
    config,
    head_object_call,
    list_objects_call,
    registry_answers,
    target,
)
from trainium_eks.doctor import sources
from trainium_eks.doctor.check_list import HttpAnswer
from trainium_eks.doctor.findings import Status
from trainium_eks.jobs.dataset_staging import (
    NEURON_PHASE1_CHECKPOINT,
    PUBLIC_BERT_SHARDS,
    PUBLIC_BERT_SHARDS_512,
)
from trainium_eks.versions import DEFAULT_KUBERNETES_VERSION, KUBERNETES_RELEASES
from trainium_job.neuron_stack import NEURON_STACK


def test_given_the_version_in_standard_support_when_checked_then_ok_with_its_end():
    aws = aws_with([cluster_versions_call()])
    verdict = sources.kubernetes_version(target(aws))
    aws.assert_all_asked()
    assert verdict == (
        Status.OK,
        f"Kubernetes {DEFAULT_KUBERNETES_VERSION} is in standard support until 2027-09-01",
        "",
    )


def test_given_the_version_in_extended_support_when_checked_then_warn_of_the_cost():
    verdict = sources.kubernetes_version(target(aws_with([cluster_versions_call(status="EXTENDED_SUPPORT")])))
    assert verdict.status is Status.WARN
    assert "extended support" in verdict.found


@pytest.mark.parametrize(
    "call",
    [
        cluster_versions_call(rows=False),
        cluster_versions_call(status="UNSUPPORTED"),
        cluster_versions_call().failing("InvalidParameterException", 400),
    ],
)
def test_given_a_version_eks_does_not_offer_when_checked_then_fail_naming_the_library_versions(call):
    verdict = sources.kubernetes_version(target(aws_with([call])))
    assert verdict.status is Status.FAIL
    assert verdict.fix == f"set kubernetes_version to one EKS offers of {', '.join(KUBERNETES_RELEASES)}"


def test_given_the_base_image_in_the_registry_when_checked_then_its_manifest_is_asked_anonymously():
    http = registry_answers()
    verdict = sources.base_image(target(aws_with([]), http=http))
    assert verdict == (Status.OK, f"{NEURON_STACK.base_image} exists ({DIGEST})", "")
    token, manifest = http.requests
    name, tag = NEURON_STACK.base_image.removeprefix("public.ecr.aws/").rsplit(":", 1)
    assert token.full_url == f"https://public.ecr.aws/token/?scope=repository:{name}:pull"
    assert (manifest.get_method(), manifest.full_url) == (
        "HEAD",
        f"https://public.ecr.aws/v2/{name}/manifests/{tag}",
    )
    assert manifest.get_header("Authorization") == "Bearer anonymous"


def test_given_a_tag_the_registry_does_not_have_when_checked_then_fail_pointing_at_the_stack_table():
    verdict = sources.base_image(target(aws_with([]), http=registry_answers(404)))
    assert verdict.status is Status.FAIL
    assert "trainium_job/neuron_stack.py" in verdict.fix


def test_given_the_registry_throttles_when_checked_then_warn():
    assert sources.base_image(target(aws_with([]), http=registry_answers(429))).status is Status.WARN


def test_given_no_network_when_the_image_is_checked_then_warn_not_a_traceback():
    def offline(request):
        raise urllib.error.URLError("Name or service not known")

    verdict = sources.base_image(target(aws_with([]), http=offline))
    assert verdict.status is Status.WARN
    assert "could not reach public.ecr.aws" in verdict.found


def test_given_a_refused_token_when_checked_then_the_status_is_reported():
    http = RegistryAnswers([HttpAnswer(403)])
    assert sources.base_image(target(aws_with([]), http=http)) == (
        Status.WARN,
        f"public.ecr.aws answered HTTP 403 for {NEURON_STACK.base_image}",
        "",
    )


BUCKET, KEY = PUBLIC_BERT_SHARDS.removeprefix("s3://").split("/", 1)


def test_given_the_public_tar_when_checked_then_it_is_read_unsigned_like_the_staging_job():
    aws = aws_with([head_object_call(BUCKET, KEY)])
    verdict = sources.dataset_source(target(aws))
    aws.assert_all_asked()
    assert verdict.status is Status.OK
    assert aws.asked == [("s3", True)]
    assert "readable without signing (45.0 GB)" in verdict.found


@pytest.mark.parametrize(
    ("code", "status", "words"), [("403", 403, "not readable"), ("404", 404, "does not exist")]
)
def test_given_a_tar_that_cannot_be_read_when_checked_then_fail(code, status, words):
    aws = aws_with([head_object_call(BUCKET, KEY).failing(code, status)])
    verdict = sources.dataset_source(target(aws))
    assert verdict.status is Status.FAIL
    assert words in verdict.found


def test_given_a_private_source_when_checked_then_the_fix_names_the_fsx_import():
    source = "s3://my-private-bucket/bert/shards.tar"
    aws = aws_with([head_object_call("my-private-bucket", "bert/shards.tar").failing("403", 403)])
    verdict = sources.dataset_source(target(aws, config(training_dataset_source=source)))
    assert "fsx_s3_import_uri" in verdict.fix


@pytest.mark.parametrize(("count", "status"), [(1, Status.OK), (0, Status.FAIL)])
def test_given_a_prefix_source_when_checked_then_it_must_list_objects(count, status):
    source = "s3://my-bucket/bert/shards/"
    aws = aws_with([list_objects_call("my-bucket", "bert/shards/", count)])
    assert sources.dataset_source(target(aws, config(training_dataset_source=source))).status is status


@pytest.mark.parametrize(
    "context",
    [
        {"training_dataset_source": "fsx:/dataset/shards"},
        {"preparation_enabled": "true", "training_phases": "1"},
        {"training_enabled": "false"},
    ],
)
def test_given_no_s3_source_in_use_when_checked_then_ok_without_a_call(context):
    aws = aws_with([])
    assert sources.dataset_source(target(aws, config(**context))).status is Status.OK
    assert aws.asked == []


PHASE2_BUCKET, PHASE2_KEY = PUBLIC_BERT_SHARDS_512.removeprefix("s3://").split("/", 1)
START_BUCKET, START_KEY = NEURON_PHASE1_CHECKPOINT.removeprefix("s3://").split("/", 1)
PHASE2_ALONE = {"training_phases": "2", "phase2_init_from": NEURON_PHASE1_CHECKPOINT}


def test_given_both_phases_when_checked_then_phase2_shards_are_read_unsigned_too():
    aws = aws_with([head_object_call(PHASE2_BUCKET, PHASE2_KEY)])
    verdict = sources.phase2_dataset_source(target(aws))
    aws.assert_all_asked()
    assert verdict.status is Status.OK and aws.asked == [("s3", True)]
    assert verdict.found.startswith(PUBLIC_BERT_SHARDS_512)


def test_given_phase2_alone_when_checked_then_phase1_shards_are_not_asked_for():
    aws = aws_with([])
    verdict = sources.dataset_source(target(aws, config(**PHASE2_ALONE)))
    assert verdict.status is Status.OK and "training_phases=2" in verdict.found
    assert aws.asked == []


@pytest.mark.parametrize("context", [{"training_phases": "1"}, {"training_enabled": "false"}])
def test_given_no_phase2_when_checked_then_its_shards_are_not_asked_for(context):
    aws = aws_with([])
    assert sources.phase2_dataset_source(target(aws, config(**context))).status is Status.OK
    assert aws.asked == []


def test_given_phase2_alone_from_neurons_checkpoint_when_checked_then_it_is_read_unsigned():
    aws = aws_with([head_object_call(START_BUCKET, START_KEY, size=4_010_000_000)])
    verdict = sources.phase2_start(target(aws, config(**PHASE2_ALONE)))
    aws.assert_all_asked()
    assert verdict == (Status.OK, f"{NEURON_PHASE1_CHECKPOINT} is readable without signing (4.0 GB)", "")


def test_given_a_start_checkpoint_that_does_not_exist_when_checked_then_fail_naming_the_key():
    missing = "s3://my-bucket/checkpoints/ckpt_100.pt"
    aws = aws_with([head_object_call("my-bucket", "checkpoints/ckpt_100.pt").failing("404", 404)])
    context = {**PHASE2_ALONE, "phase2_init_from": missing}
    verdict = sources.phase2_start(target(aws, config(**context)))
    assert verdict == (Status.FAIL, f"{missing} does not exist (404)", "check phase2_init_from")


@pytest.mark.parametrize(
    ("context", "found"),
    [
        ({}, "not used (phase 2 starts from phase 1's checkpoint)"),
        (
            {**PHASE2_ALONE, "phase2_init_from": "fsx:/runs/bert-large-phase1"},
            "fsx:/runs/bert-large-phase1 is read on FSx by the staging Job; not checked from here",
        ),
    ],
)
def test_given_phase2_from_phase1_or_from_fsx_when_checked_then_no_call(context, found):
    aws = aws_with([])
    assert sources.phase2_start(target(aws, config(**context))) == (Status.OK, found, "")
    assert aws.asked == []
