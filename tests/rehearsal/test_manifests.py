"""What the rehearsal reads from the synthesized template and the Dockerfiles."""

from __future__ import annotations

import json

import pytest

from tests.rehearsal.manifests import DOCKERFILES, Mount, Policy, image, pod_spec, workload
from tests.rehearsal.substitutions import FABRIC_CHECK_SIZE_MIB, SLEEP_SCALE, rehearsed_command
from trainium_job.exit_codes import BUDGET_EXIT_CODE, DEADLINE_EXIT_CODE
from trainium_job.fabric_check_steps import EXIT_CODE as FABRIC_EXIT_CODE
from trainium_job.stop_budget import termination_grace_period_s


def test_given_the_default_template_then_the_gang_staging_and_tensorboard_pods_are_read(training_json):
    w = workload(training_json)
    assert w.namespace == "training" and w.replicas == 2 and w.task == "worker"
    assert w.policies == (
        Policy("AbortJob", exit_code=FABRIC_EXIT_CODE),
        Policy("AbortJob", exit_code=DEADLINE_EXIT_CODE),
        Policy("AbortJob", exit_code=BUDGET_EXIT_CODE),
        # The default capacity (Karpenter): a gang not complete after trainium_gang_wait_minutes.
        Policy("AbortJob", event="PodPending"),
        Policy("RestartJob", event="PodEvicted"),
        Policy("RestartJob", event="PodFailed"),
    )
    assert w.action_for_failure(FABRIC_EXIT_CODE) == "AbortJob" and w.action_for_failure(143) == "RestartJob"
    assert w.worker.field_env == {"NODE_NAME": "spec.nodeName"} and "NODE_NAME" not in w.worker.env
    assert w.worker.container == "trainer" and w.worker.command[:3] == (
        "python",
        "-m",
        "trainium_job.pod_program",
    )
    assert w.submitter is not None and w.submitter.command[:3] == ("python", "-m", "training.launch.submit")
    assert w.submitter.mounts == (
        Mount("/run/trainium-job", "configMap", read_only=True, config_map=w.job_name),
        Mount("/data", "claim", read_only=True),
    )
    assert json.loads(w.config_maps[w.job_name]["job.json"]) == w.job
    assert w.worker.mounts == (Mount("/data", "claim"), Mount("/dev/shm", "emptyDir", memory=True))
    assert w.worker.grace_period_s == termination_grace_period_s()
    assert w.worker.instance_type == "trn1.32xlarge" and w.worker.claim_path() == "/data"
    assert w.staging.mounts == (Mount("/data", "claim"), Mount("/tmp", "emptyDir"))
    assert w.staging.grace_period_s == 30  # Kubernetes' default: the Job sets none
    assert w.tensorboard.mounts == (Mount("/data", "claim", read_only=True), Mount("/tmp", "emptyDir"))
    assert w.tensorboard.command[0] == "tensorboard" and w.tensorboard.port == 6006
    assert w.tensorboard.readiness_path == "/"


def test_given_the_small_variant_then_its_pods_have_the_default_pods_shape(training_json, variant):
    default = workload(training_json)
    for mine, theirs in ((variant.worker, default.worker), (variant.staging, default.staging)):
        assert mine.mounts == theirs.mounts and sorted(mine.env) == sorted(theirs.env)
        assert mine.grace_period_s == theirs.grace_period_s and mine.instance_type == theirs.instance_type
    assert variant.policies == default.policies and variant.replicas == default.replicas
    assert variant.tensorboard == default.tensorboard


def test_given_the_programs_then_the_rehearsal_changes_only_their_polls_back_off_and_the_fabric_checks_buffer(
    variant,
):
    synthesized = json.loads(variant.worker.command[3])
    rehearsed = json.loads(rehearsed_command(variant.worker.command)[3])
    measure = synthesized["fabric_check"]["measure"]
    assert measure[measure.index("--size_mib") + 1] == "128"
    measure[measure.index("--size_mib") + 1] = str(FABRIC_CHECK_SIZE_MIB)
    for phase in synthesized["phases"]:
        for wait in phase["waits"]:
            assert wait["poll_s"] == 30
            wait["poll_s"] = max(1, round(30 * SLEEP_SCALE))
    assert synthesized["budget"]["check_every_s"] == 60
    synthesized["budget"]["check_every_s"] = 1
    assert rehearsed == synthesized  # the deadlines are the synthesized ones
    staging = json.loads(variant.staging.command[3])
    assert staging["backoff_s"] == 60 and json.loads(rehearsed_command(variant.staging.command)[3]) == {
        **staging,
        "backoff_s": 1,
    }
    assert rehearsed_command(variant.tensorboard.command) == variant.tensorboard.command


def test_given_an_env_value_from_elsewhere_than_a_pod_field_then_reading_the_pod_fails_naming_it():
    secret = {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}
    template = {"spec": {"containers": [{"name": "c", "command": ["true"], "env": [secret]}]}}
    with pytest.raises(ValueError, match="env TOKEN: the rehearsal has no stand-in for \\['secretKeyRef'\\]"):
        pod_spec(template)


def test_given_a_volume_without_a_stand_in_then_reading_the_pod_fails_naming_it():
    template = {
        "spec": {
            "containers": [
                {"name": "c", "command": ["true"], "volumeMounts": [{"name": "v", "mountPath": "/x"}]}
            ],
            "volumes": [{"name": "v", "secret": {"secretName": "x"}}],
        }
    }
    with pytest.raises(
        ValueError, match="volume v: the rehearsal has no stand-in for \\['name', 'secret'\\]"
    ):
        pod_spec(template)


def test_given_the_dockerfiles_then_their_workdir_and_env_are_read():
    built = image(DOCKERFILES["trainer"])
    assert built.workdir == "/opt/trainium-bert"
    assert built.env == {"PYTHONPATH": "/opt/trainium-bert", "PYTHONUNBUFFERED": "1"}
    # The tools image (TensorBoard, the exporters) holds the same package folders, as nobody.
    tools = image(DOCKERFILES["tensorboard"])
    assert (tools.workdir, tools.env) == (built.workdir, built.env)
    assert (built.user, tools.user) == (None, (65534, 65534))


def test_given_a_user_by_name_then_the_dockerfile_reader_refuses_it(tmp_path):
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM x\nUSER nobody\n")
    with pytest.raises(ValueError, match="only numeric IDs"):
        image(dockerfile)


def test_given_an_env_line_without_a_value_then_the_dockerfile_reader_refuses_it(tmp_path):
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM x\nENV A=1 \\\n    B\n")
    with pytest.raises(ValueError, match="only the KEY=VALUE form"):
        image(dockerfile)
