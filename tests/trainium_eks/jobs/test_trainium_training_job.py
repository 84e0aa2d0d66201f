"""A job of the user's own program (TrainiumTrainingJob): the image, the pod the library's runtime
comes into, the submitter, a name that changes exactly when the job or its submitter does, and
bad props refused by name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ecr as ecr
from aws_cdk.assertions import Template

from tests.support import k8s_manifests, resources, submitted_jobs, validate_k8s
from tests.trainium_eks.jobs.training_support import bare_cluster, baseline_violations
from trainium_eks import JobImage, TrainiumTrainingJob
from trainium_job.errors import ConfigError
from trainium_job.instances import instance_facts
from trainium_job.pod import IMAGE_LIBRARY_DIR, RUNTIME_DIR, RUNTIME_PACKAGES
from trainium_job.pod_program import loads
from trainium_job.program_job import JOB_ENV, ProgramJobSpec, TrainingCommand
from trainium_job.submission import SUBMISSION_ANNOTATION
from trainium_job.waits import Wait

DIGEST_URI = "123456789012.dkr.ecr.us-west-2.amazonaws.com/mine@sha256:" + "a" * 64
SPEC = ProgramJobSpec(command=TrainingCommand(script="/app/train.py", args=("--steps", "20")), run_name="toy")
DATA = Wait(what="my data", ready="/data/mine/.ready", deadline_s=1800, why="it is copied first")


def _folder(root: Path) -> Path:
    (root / "Dockerfile").write_text("ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nCOPY train.py /app/train.py\n")
    (root / "train.py").write_text("print('training')\n")
    return root


def _job(folder: Path, **overrides: Any) -> TrainiumTrainingJob:
    """A job of ``folder``'s image on a bare cluster, its tools image built beside it."""
    cluster = bare_cluster()
    stack = cdk.Stack.of(cluster)
    repository = ecr.Repository(stack, "Repo")
    props: dict[str, Any] = dict(
        cluster=cluster,
        facts=instance_facts("trn1.32xlarge"),
        nodes=2,
        spec=SPEC,
        claim_name="fsx-claim",
        repository=repository,
        budget_usd=100,
        submit_waits=(DATA,),
    )
    props.update(overrides)
    if "image" not in props:
        props["image"] = JobImage.from_directory(stack, "Image", directory=folder, repository=repository)
    return TrainiumTrainingJob(stack, "Job", **props)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[TrainiumTrainingJob, dict[str, Any]]:
    job = _job(_folder(tmp_path_factory.mktemp("job")))
    return job, Template.from_stack(cdk.Stack.of(job)).to_json()


def test_given_a_folder_then_it_and_the_tools_image_are_built_in_the_region_and_no_job_is_applied(built):
    job, template = built
    # Then two in-region builds (the folder's, the tools') and no image asset to upload
    tags = sorted(
        str(r["Properties"]["imageTag"])
        for r in resources(template, "Custom::CDKContainerImageBuild").values()
    )
    assert [tag.split("-")[0] for tag in tags] == ["job", "tensorboard"]
    # And the Volcano Job only in its submitter's ConfigMap: no Trainium node before the submitter's waits
    applied = [obj for _, obj in k8s_manifests(template)]
    assert not [o for o in applied if o["apiVersion"].startswith("batch.volcano.sh")]
    (volcano,) = submitted_jobs(template)
    assert volcano["metadata"]["name"] == job.job_name
    (submitter,) = [o for o in applied if o["kind"] == "Job"]
    (container,) = submitter["spec"]["template"]["spec"]["containers"]
    assert container["image"].endswith(tags[1])
    assert json.loads(container["command"][-1])["waits"][0]["ready"] == DATA.ready


def test_given_an_image_without_the_library_then_an_init_container_copies_it_and_the_program_runs_from_there(
    built,
):
    job, template = built
    (volcano,) = submitted_jobs(template)
    pod = volcano["spec"]["tasks"][0]["template"]["spec"]
    (init,) = pod["initContainers"]
    (trainer,) = pod["containers"]
    # The init container copies each package from the tools image's WORKDIR (docker/tensorboard.Dockerfile)
    # into the runtime volume the trainer mounts read-only.
    assert init["command"] == [
        "cp",
        "-R",
        *(f"{IMAGE_LIBRARY_DIR}/{p}" for p in RUNTIME_PACKAGES),
        RUNTIME_DIR,
    ]
    assert {"name": "runtime", "mountPath": RUNTIME_DIR, "readOnly": True} in trainer["volumeMounts"]
    assert {"name": "runtime", "emptyDir": {}} in pod["volumes"]
    assert trainer["command"][:2] == ["python", "-c"] and trainer["command"][3] == RUNTIME_DIR
    described = loads(trainer["command"][-1])
    assert described == job.description and described.runtime == RUNTIME_DIR
    # The script under torchrun on every node, with what a program reads of its job
    (phase,) = described.phases
    assert phase.train[-3:] == ("/app/train.py", "--steps", "20")
    assert {name for name, _ in phase.env} >= set(JOB_ENV)
    assert dict(phase.env)["TRAINIUM_JOB_RUN_DIR"] == "/data/runs/toy" == phase.run_dir
    # The ceiling at the instance's list price; the fabric check on two nodes
    assert described.budget is not None and described.budget.usd == 100
    assert described.budget.usd_per_node_hour == instance_facts("trn1.32xlarge").on_demand_usd_per_hour
    assert described.fabric_check is not None
    # The init container is as strict as baseline; the trainer adds only IPC_LOCK (EFA), as BERT's.
    assert baseline_violations(pod) == ["trainer: capabilities ['IPC_LOCK']"]
    validate_k8s({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": pod}, "1.36")


def test_given_an_image_with_the_library_then_no_init_container_and_the_program_runs_as_a_module():
    # Given the library's own training image (it holds trainium_job and training)
    image = JobImage(uri=DIGEST_URI, key="training-abc", has_library=True)
    job = _job(Path("."), image=image, tools_image="123456789012.dkr.ecr.us-west-2.amazonaws.com/t:tools-1")
    pod = job.job["spec"]["tasks"][0]["template"]["spec"]
    assert "initContainers" not in pod
    assert pod["containers"][0]["command"][:3] == ["python", "-m", "trainium_job.pod_program"]


def test_given_the_same_app_synthesized_twice_then_the_job_has_the_same_name(tmp_path):
    # The tools image's URI is a token whose number depends on what the app built before it.
    folder = _folder(tmp_path)
    first, second = _job(folder), _job(folder)
    assert first.job_name == second.job_name


def test_given_only_the_submitters_wait_changed_then_the_job_and_its_submitter_are_new(tmp_path):
    # A batch Job's pod template is immutable, and the Volcano Job goes with the submitter that owns it.
    folder = _folder(tmp_path)
    before = _job(folder)
    after = _job(
        folder, submit_waits=(Wait(what="my data", ready=DATA.ready, deadline_s=3600, why="longer"),)
    )
    assert before.job_name != after.job_name
    assert (
        before.job["metadata"]["annotations"][SUBMISSION_ANNOTATION]
        != after.job["metadata"]["annotations"][SUBMISSION_ANNOTATION]
    )
    assert before.submission is not None and after.submission is not None
    assert before.submission.manifest.node.id != after.submission.manifest.node.id


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"facts": "trn1.32xlarge"}, "facts"),
        ({"nodes": 0}, "nodes"),
        ({"nodes": 2, "facts": instance_facts("trn1.2xlarge")}, "nodes"),
        ({"max_nodes": 1}, "max_nodes"),
        ({"spec": "train.py"}, "spec"),
        ({"image": "mine:latest"}, "image"),
        ({"budget_usd": 0}, "budget_usd"),
        ({"budget_usd": 100, "facts": instance_facts("trn2.48xlarge")}, "budget_usd"),
        ({"repository": None}, "repository"),
        ({"namespace": "Training"}, "namespace"),
    ],
)
def test_given_bad_props_then_one_config_error_names_the_field(tmp_path, overrides, field):
    with pytest.raises(ConfigError) as err:
        _job(_folder(tmp_path), **overrides)
    assert err.value.field_name == field


def test_given_a_tools_image_token_then_it_is_refused_by_name(tmp_path):
    stack = cdk.Stack()
    token = ecr.Repository(stack, "Other").repository_uri
    with pytest.raises(ConfigError) as err:
        _job(_folder(tmp_path), tools_image=token)
    assert err.value.field_name == "tools_image"


@pytest.mark.parametrize("uri", ["mine:latest", "123456789012.dkr.ecr.us-west-2.amazonaws.com/mine:v1"])
def test_given_an_image_by_tag_then_from_uri_refuses_it(uri):
    with pytest.raises(ConfigError, match="by digest"):
        JobImage.from_uri(uri)
