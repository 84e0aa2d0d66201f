"""What the rehearsal reads from the synthesized template and the Dockerfiles."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tests.rehearsal.manifests import (
    DOCKERFILES,
    ConfigMapKeyRef,
    Mount,
    Policy,
    StackOutput,
    Workload,
    config_map_env,
    copy_as_docker_would,
    deployed_config_maps,
    image,
    pod_spec,
    workload,
)
from tests.rehearsal.substitutions import (
    FABRIC_CHECK_SIZE_MIB,
    SLEEP_SCALE,
    STACK_OUTPUT_STANDINS,
    rehearsed_command,
)
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
        Mount("/run/trainium-job", "configMap", read_only=True, config_map=w.job_name, volume="job"),
        Mount("/data", "claim", read_only=True, volume="data"),
    )
    assert json.loads(w.config_maps[w.job_name]["job.json"]) == w.job
    assert w.worker.mounts == (
        Mount("/data", "claim", volume="data"),
        Mount("/dev/shm", "emptyDir", memory=True, volume="dshm"),
    )
    assert w.worker.init_containers == ()  # the library's own image holds the library
    assert w.worker.grace_period_s == termination_grace_period_s()
    assert w.worker.instance_type == "trn1.32xlarge" and w.worker.claim_path() == "/data"
    assert w.staging is not None and w.tensorboard is not None
    assert w.staging.mounts == (
        Mount("/data", "claim", volume="data"),
        Mount("/tmp", "emptyDir", volume="tmp"),
    )
    assert w.staging.grace_period_s == 30  # Kubernetes' default: the Job sets none
    assert w.tensorboard.mounts == (
        Mount("/data", "claim", read_only=True, volume="data"),
        Mount("/tmp", "emptyDir", volume="tmp"),
    )
    assert w.tensorboard.command[0] == "tensorboard" and w.tensorboard.port == 6006
    assert w.tensorboard.readiness_path == "/"


def test_given_the_small_variant_then_its_pods_have_the_default_pods_shape(training_json, variant):
    default = workload(training_json)
    assert default.staging is not None
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


def test_given_the_default_template_then_the_gang_reads_the_model_bucket_from_its_config_map(training_json):
    w = workload(training_json)
    # The gang's variable is the ConfigMap's key, optional (Kubernetes API, EnvVarSource
    # configMapKeyRef: a ConfigMapKeySelector of name, key and optional)
    assert w.worker.config_env == {
        "TRAINIUM_MODEL_BUCKET": ConfigMapKeyRef("trainium-model-bucket", "bucket", optional=True)
    }
    # whose value the template leaves to CloudFormation: the platform stack's bucket output
    assert w.stack_outputs == {
        "trainium-model-bucket": {"bucket": StackOutput("trn-bert-platform", "WorkloadModelBucketName")}
    }
    assert w.config_maps["trainium-model-bucket"] == {"bucket": "FN_GetStackOutput"}
    # so the rehearsal reads it only where it has a value for that output: the stand-in S3's bucket
    assert config_map_env(w.worker, w, STACK_OUTPUT_STANDINS) == {"TRAINIUM_MODEL_BUCKET": "rehearsal-models"}
    with pytest.raises(ValueError, match="is the output WorkloadModelBucketName of stack trn-bert-platform"):
        config_map_env(w.worker, w, {})
    # And the pods of the gang and of the stagings run as the ServiceAccount with Pod Identity
    assert w.pod_identity == frozenset({"bert-trainer"})
    assert w.staging is not None and w.tensorboard is not None and w.submitter is not None
    assert w.worker.service_account == w.staging.service_account == "bert-trainer"
    assert (w.tensorboard.service_account, w.submitter.service_account) == ("default", "job-submitter")


def _reader(**ref: object) -> Workload:
    """A workload whose gang pod reads ``VAR`` from ``configMapKeyRef`` ``ref``, with ConfigMap
    ``present`` (key ``bucket``) in its template."""
    env = {"name": "VAR", "valueFrom": {"configMapKeyRef": ref}}
    spec = pod_spec({"spec": {"containers": [{"name": "c", "command": ["true"], "env": [env]}]}})
    return Workload(
        namespace="training", job_name="j", task="worker", replicas=1, policies=(), worker=spec,
        config_maps={"present": {"bucket": "models"}},
    )  # fmt: skip


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ({"name": "present", "key": "bucket"}, {"VAR": "models"}),
        ({"name": "present", "key": "bucket", "optional": False}, {"VAR": "models"}),
        ({"name": "present", "key": "other", "optional": True}, {}),
        ({"name": "absent", "key": "bucket", "optional": True}, {}),
        ({"name": "present", "key": "other"}, "ConfigMap present has no key other"),
        ({"name": "absent", "key": "bucket"}, "ConfigMap absent is not in the template"),
        ({"name": "absent", "key": "bucket", "optional": False}, "ConfigMap absent is not in the template"),
    ],
)
def test_given_a_config_map_key_ref_then_it_resolves_as_the_kubelet_resolves_it(ref, expected):
    # Kubernetes API, ConfigMapKeySelector: optional, "Specify whether the ConfigMap or its key must
    # be defined" (unset: false). The kubelet (pkg/kubelet/kubelet_pods.go makeEnvironmentVariables)
    # skips the variable for a ConfigMap not found or a key missing when optional, else fails the
    # container's start: "couldn't find key %v in ConfigMap %v/%v" (CreateContainerConfigError).
    reader = _reader(**ref)
    if isinstance(expected, dict):
        assert config_map_env(reader.worker, reader, {}) == expected
    else:
        with pytest.raises(ValueError, match=f"env VAR: {expected}, and the reference is not optional"):
            config_map_env(reader.worker, reader, {})


def test_given_a_stack_output_in_a_config_map_then_the_deployed_value_is_the_stand_in_s_value():
    outputs = {"present": {"bucket": StackOutput("platform", "Bucket")}}
    reader = dataclasses.replace(_reader(name="present", key="bucket", optional=True), stack_outputs=outputs)
    assert deployed_config_maps(reader, {"Bucket": "b"}) == {"present": {"bucket": "b"}}
    assert config_map_env(reader.worker, reader, {"Bucket": "b"}) == {"VAR": "b"}
    # an output without a value is refused even behind an optional reference: the ConfigMap is there
    with pytest.raises(ValueError, match="output Bucket of stack platform, known at deploy"):
        config_map_env(reader.worker, reader, {})


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


def test_given_a_pod_with_an_init_container_then_each_container_is_read_with_its_own_mounts_and_security():
    # Given a pod whose init container fills an emptyDir its container reads (the shape of a job
    # of the user's own image: trainium_job.pod runtime_init_container)
    template = {
        "spec": {
            "initContainers": [
                {
                    "name": "fill",
                    "image": "registry/tools:tools-1",
                    "command": ["cp", "-R", "/src", "/shared"],
                    "volumeMounts": [{"name": "shared", "mountPath": "/shared"}],
                    "securityContext": {"runAsUser": 65534, "readOnlyRootFilesystem": True},
                }
            ],
            "containers": [
                {
                    "name": "main",
                    "image": "registry/job:job-1",
                    "command": ["ls", "/opt/shared"],
                    "volumeMounts": [{"name": "shared", "mountPath": "/opt/shared", "readOnly": True}],
                }
            ],
            "volumes": [{"name": "shared", "emptyDir": {}}],
        }
    }
    # When it is read
    spec = pod_spec(template)
    (init,) = spec.init_containers
    # Then each container has its command, image and securityContext, and both mount one volume
    assert (spec.container, spec.image, spec.command) == ("main", "registry/job:job-1", ("ls", "/opt/shared"))
    assert (init.container, init.image, init.command[0]) == ("fill", "registry/tools:tools-1", "cp")
    assert init.security.run_as_user == 65534 and init.security.read_only_root
    assert spec.security.run_as_user is None and not spec.security.read_only_root
    assert init.mounts == (Mount("/shared", "emptyDir", volume="shared"),)
    assert spec.mounts == (Mount("/opt/shared", "emptyDir", read_only=True, volume="shared"),)


def test_given_a_program_started_from_a_runtime_folder_then_the_rehearsal_shortens_its_polls_too():
    # Given the command of a pod whose image lacks the library (trainium_job.worker BOOTSTRAP)
    description = {"waits": [{"poll_s": 30}], "budget": {"check_every_s": 60}}
    code = (
        "import runpy, sys; sys.path.insert(0, sys.argv.pop(1)); runpy.run_module('trainium_job.pod_program')"
    )
    command = ("python", "-c", code, "/opt/runtime", json.dumps(description))
    # Then only its description changes, as for python -m
    rehearsed = rehearsed_command(command)
    assert rehearsed[:4] == command[:4]
    assert json.loads(rehearsed[4]) == {"waits": [{"poll_s": 1}], "budget": {"check_every_s": 1}}
    # and code that runs another module is left alone
    other = ("python", "-c", code.replace("trainium_job.pod_program", "my_module"), "/x", "{}")
    assert rehearsed_command(other) == other


def test_given_a_dockerfile_then_its_copies_are_laid_out_as_docker_builds_them(tmp_path):
    # Given a build context and a Dockerfile of two stages (Dockerfile reference, COPY: a source
    # folder gives its contents; a destination with a trailing slash, or of several sources, is a
    # folder, else a file source is written at it; a relative one is below the WORKDIR)
    context = tmp_path / "context"
    (context / "pkg" / "sub").mkdir(parents=True)
    (context / "pkg" / "a.py").write_text("a")
    (context / "pkg" / "sub" / "b.py").write_text("b")
    (context / "pkg" / "sub" / "b.pyc").write_text("compiled")
    (context / "run.py").write_text("run")
    (context / "conf.txt").write_text("conf")
    (context / ".dockerignore").write_text("# left out\n**/*.pyc\n")
    (context / "Dockerfile").write_text(
        "FROM base AS first\nWORKDIR /elsewhere\nCOPY run.py /first-stage-only.py\n"
        "FROM base\nWORKDIR /opt\nWORKDIR app\n"
        'COPY pkg/ pkg\nCOPY run.py /app/main.py\nCOPY ["run.py", "conf.txt", "etc/"]\nCOPY conf.txt ./\n'
    )
    # When its files are laid out
    workdir = copy_as_docker_would(context / "Dockerfile", context, tmp_path / "image")
    # Then they are where the image has them, the ignored file left out, the first stage's gone
    assert workdir == tmp_path / "image" / "opt" / "app"
    files = {str(p.relative_to(tmp_path / "image")) for p in (tmp_path / "image").rglob("*") if p.is_file()}
    assert files == {
        "opt/app/pkg/a.py",
        "opt/app/pkg/sub/b.py",
        "app/main.py",
        "opt/app/etc/run.py",
        "opt/app/etc/conf.txt",
        "opt/app/conf.txt",
    }
    assert (tmp_path / "image" / "app" / "main.py").read_text() == "run"


@pytest.mark.parametrize(
    "line",
    ["ADD x.tar /x/", "COPY --from=build /x /x", "COPY --chown=1:1 x /x", "COPY ${SRC} /x", "COPY *.py /x/"],
)
def test_given_a_copy_the_rehearsal_cannot_reproduce_then_laying_out_the_image_fails_naming_it(
    tmp_path, line
):
    (tmp_path / "Dockerfile").write_text(f"FROM base\n{line}\n")
    with pytest.raises(ValueError, match="not reproduced|only plain COPY"):
        copy_as_docker_would(tmp_path / "Dockerfile", tmp_path, tmp_path / "image")


def test_given_a_copy_of_a_missing_file_then_laying_out_the_image_fails_as_the_build_would(tmp_path):
    (tmp_path / "Dockerfile").write_text("FROM base\nWORKDIR /app\nCOPY train.py /app/train.py\n")
    with pytest.raises(FileNotFoundError, match="COPY train.py: not in the build context"):
        copy_as_docker_would(tmp_path / "Dockerfile", tmp_path, tmp_path / "image")
