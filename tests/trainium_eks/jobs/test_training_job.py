"""The pretraining job: synth-time errors, the Volcano Job's fields, naming, pod security."""

from __future__ import annotations

import copy
import json

import pytest

from tests.support import validate_k8s
from tests.trainium_eks.jobs.training_support import (
    VOLCANO_ACTIONS,
    VOLCANO_EVENTS,
    VOLCANO_JOB_REQUIRED,
    baseline_violations,
    job_stack,
    manifests_of,
    submitted_jobs,
)
from trainium_job.errors import ConfigError
from trainium_job.exit_codes import aborting_codes
from trainium_job.naming import DEFAULT_NAME_PREFIX
from trainium_job.pod_program import MODULE, loads
from trainium_job.waits import Wait


@pytest.fixture(scope="module")
def default_job():
    return job_stack()


@pytest.mark.parametrize(
    "overrides,field",
    [
        # Spec fields are named by the context key that sets them; nodes by desired_nodes.
        ({"nproc_per_node": 33}, "training_nproc_per_node"),
        ({"nodes": 3}, "desired_nodes"),
        ({"global_batch": 16000}, "training_global_batch"),
        ({"name_prefix": "x" * 50}, "name_prefix"),
        ({"run_name": "r" * 64}, "training_run_name"),
        ({"rdzv_backend": "etcd"}, "training_rdzv_backend"),
        ({"queue": "Training"}, "queue"),
    ],
)
def test_given_bad_props_when_job_built_then_config_error_names_the_key(overrides, field):
    with pytest.raises(ConfigError) as err:
        job_stack(**overrides)
    assert err.value.field_name == field
    assert "\n" not in str(err.value)


def test_given_trn1_2xlarge_on_two_nodes_when_job_built_then_error():
    from trainium_job.instances import instance_facts

    with pytest.raises(ConfigError, match="no EFA"):
        job_stack(facts=instance_facts("trn1.2xlarge"), nodes=2, max_nodes=2, global_batch=64)


def test_given_reference_recipe_then_64_workers_and_accumulation_16(default_job):
    assert default_job.plan.workers == 64
    assert default_job.plan.grad_accum_usteps == 16
    assert 16 * 64 * 16 == default_job.plan.global_batch == 16384


def test_given_default_job_then_volcano_job_has_gang_retries_and_svc(default_job):
    job = default_job.job
    spec = job["spec"]
    for key in VOLCANO_JOB_REQUIRED["spec"]:
        assert key in spec
    assert job["apiVersion"] == "batch.volcano.sh/v1alpha1" and job["kind"] == "Job"
    assert spec["schedulerName"] == "volcano" and spec["queue"] == "training"
    assert spec["minAvailable"] == 2 and spec["maxRetry"] == 3
    # The fabric check's, a deadline's and the ceiling's exit codes abort the job; Volcano matches
    # the first policy, so they lead.
    aborts, restarts = spec["policies"][:3], spec["policies"][3:]
    assert aborts == [{"exitCode": code, "action": "AbortJob"} for code in (69, 66, 77)]
    assert [a["exitCode"] for a in aborts] == list(aborting_codes())
    assert {(p["event"], p["action"]) for p in restarts} == {
        ("PodEvicted", "RestartJob"),
        ("PodFailed", "RestartJob"),
    }
    for p in restarts:
        assert p["event"] in VOLCANO_EVENTS and p["action"] in VOLCANO_ACTIONS
    assert all(a["action"] in VOLCANO_ACTIONS for a in aborts)
    assert "svc" in spec["plugins"]
    (task,) = spec["tasks"]
    assert task["replicas"] == 2 and task["minAvailable"] == 2 and task["name"] == "worker"


def test_given_default_job_then_pod_takes_whole_node_with_fsx_and_shm(default_job):
    pod = default_job.job["spec"]["tasks"][0]["template"]["spec"]
    (c,) = pod["containers"]
    res = c["resources"]
    assert res["limits"]["aws.amazon.com/neuron"] == "16"
    assert res["limits"]["vpc.amazonaws.com/efa"] == "8"
    assert res["requests"] == res["limits"]
    # trn1.32xlarge allocatable (trainium_job.allocatable): 128,000m - 390m kube-reserved, and
    # 484,966 MiB modeled MemTotal - 10,256 huge pages - 2,972 kube-reserved - 100 eviction; less
    # the default platform's DaemonSets (531m / 498 MiB) and the margin (500m / 1,024 MiB).
    assert res["limits"]["cpu"] == "126579m" and res["limits"]["memory"] == "470116Mi"
    assert pod["nodeSelector"] == {
        "node.kubernetes.io/instance-type": "trn1.32xlarge",
        "trainium-eks/pool": "trainium",
    }
    assert pod["tolerations"] == [
        {"key": "aws.amazon.com/neuron", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
    ]
    vols = {v["name"]: v for v in pod["volumes"]}
    assert vols["data"]["persistentVolumeClaim"]["claimName"] == "fsx-claim"
    assert vols["dshm"]["emptyDir"] == {"medium": "Memory"}
    assert {m["mountPath"] for m in c["volumeMounts"]} == {"/data", "/dev/shm"}
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}
    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}  # the fabric check names it
    assert c["ports"] == [
        {"name": "metrics", "containerPort": 9400, "protocol": "TCP"},
        {"name": "program", "containerPort": 9401, "protocol": "TCP"},
    ]
    assert env["FI_PROVIDER"] == "efa" and env["FI_EFA_USE_DEVICE_RDMA"] == "1"
    # Read by no consumer of this image (AL2023 kernels; undocumented; the runtime default).
    assert not {"FI_EFA_FORK_SAFE", "CCOM_SOCKET_IFNAME", "NEURON_RT_RESET_CORES"} & set(env)
    # The compile cache is each phase's, in the description the pod program runs (not the container's).
    assert "NEURON_CC_FLAGS" not in env
    (phase,) = default_job.description.phases
    assert dict(phase.env)["NEURON_CC_FLAGS"] == "--cache_dir=/data/neuron-cache/bert-large-seq128"
    # torchrun restarts need a fresh rendezvous store per round (trainium_job.launch.launch_env).
    assert env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"


def test_given_default_job_then_the_container_runs_the_pod_program_with_its_description(default_job):
    pod = default_job.job["spec"]["tasks"][0]["template"]["spec"]
    command = pod["containers"][0]["command"]
    assert command[:3] == ["python", "-m", MODULE] and len(command) == 4
    described = loads(command[3])
    assert described == default_job.description
    name = default_job.job_name
    assert described.job == name and described.nodes == 2
    # c10d: the pod named like the endpoint hosts the store (tests/contracts/test_torch_elastic.py)
    assert described.rendezvous is not None and described.rendezvous.host == f"{name}-worker-0"
    assert described.driver_check == ("python", "-m", "training.node.driver_check")
    (phase,) = described.phases
    assert [w.ready for w in phase.waits] == ["/data/datasets/bert-wikicorpus-seq128/.staged"]
    assert (
        phase.precompile is not None
        and phase.precompile.marker == "/data/neuron-cache/bert-large-seq128/.precompiled"
    )
    pre = phase.precompile.argv
    assert (
        pre[0] == "neuron_parallel_compile"
        and pre[pre.index("--steps_this_run") + 1] == "3"
        and "--precompile" in pre
    )
    argv = phase.train
    assert argv[0] == "torchrun"
    assert argv[argv.index("--rdzv_endpoint") + 1] == f"{name}-worker-0.{name}:29400"
    assert argv[argv.index("--rdzv_backend") + 1] == "c10d"
    assert argv[argv.index("--max_restarts") + 1] == "3"
    assert argv[argv.index("--nproc_per_node") + 1] == "32"
    for flag, value in (
        ("--batch_size", "16"),
        ("--grad_accum_usteps", "16"),
        ("--max_steps", "28125"),
        ("--data_dir", "/data/datasets/bert-wikicorpus-seq128"),
        ("--output_dir", "/data/runs/bert-large-phase1"),
        ("--checkpoint_every", "200"),
    ):
        assert argv[argv.index(flag) + 1] == value
    assert described.grace_s == pod["terminationGracePeriodSeconds"]


def test_given_pod_template_then_valid_pod_and_baseline_pod_security(default_job):
    template = default_job.job["spec"]["tasks"][0]["template"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", **copy.deepcopy(template["metadata"])},
        "spec": copy.deepcopy(template["spec"]),
    }
    validate_k8s(pod, "1.36")
    # IPC_LOCK (EFA's pinned buffers) is the one capability beyond baseline; nothing else is.
    assert baseline_violations(pod["spec"]) == ["trainer: capabilities ['IPC_LOCK']"]


def test_given_pod_template_then_container_drops_all_but_ipc_lock_with_runtime_default_seccomp(default_job):
    spec = default_job.job["spec"]["tasks"][0]["template"]["spec"]
    (container,) = spec["containers"]
    sc = container["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["IPC_LOCK"]}
    assert sc["allowPrivilegeEscalation"] is False and sc["privileged"] is False
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"} == spec["securityContext"]["seccompProfile"]


def test_given_privileged_pod_then_checker_reports_it():
    spec = {"hostNetwork": True, "containers": [{"name": "c", "securityContext": {"privileged": True}}]}
    assert baseline_violations(spec) == ["hostNetwork", "c: privileged", "c: no cpu/memory limits"]


def test_given_one_script_argument_changed_then_only_the_name_changes():
    a, b = job_stack(), job_stack(script_args={"lr": 0.0003})
    again = job_stack()
    assert a.job_name == again.job_name and a.job == again.job
    assert a.job_name != b.job_name
    assert (
        a.job_name.startswith(f"{DEFAULT_NAME_PREFIX}-") and len(a.job_name) == len(DEFAULT_NAME_PREFIX) + 9
    )
    text_a = json.dumps(a.job).replace(a.job_name, "NAME")
    text_b = json.dumps(b.job).replace(b.job_name, "NAME")
    assert text_a != text_b
    # the argument itself differs (in the description, JSON inside the pod's command)
    assert text_b.replace('\\"--lr\\",\\"0.0003\\",', "") == text_a


def test_given_etcd_backend_with_endpoint_then_torchrun_uses_it():
    job = job_stack(rdzv_backend="etcd-v2", etcd_endpoint="etcd.etcd.svc.cluster.local:2379")
    argv = job.description.phases[0].train
    at = argv.index("--rdzv_backend")
    assert argv[at : at + 4] == (
        "--rdzv_backend",
        "etcd-v2",
        "--rdzv_endpoint",
        "etcd.etcd.svc.cluster.local:2379",
    )
    assert job.description.rendezvous is None  # no c10d store to host


def test_given_default_app_then_no_volcano_job_is_applied_but_its_submitter_holds_it(training_json):
    # Given the synthesized training stack, then the stack applies no Volcano Job: the gang's pods,
    # and the Trainium nodes they would ask for, come only from the submitter (trainium_job.submission)
    objs = manifests_of(training_json)
    assert not [o for o in objs if o["apiVersion"].startswith("batch.volcano.sh")]
    (held,) = submitted_jobs(training_json)
    assert held["apiVersion"] == "batch.volcano.sh/v1alpha1" and held["kind"] == "Job"
    submitters = [o for o in objs if o["kind"] == "Job" and o["metadata"]["name"].startswith("submit-")]
    (submitter,) = submitters
    assert submitter["metadata"]["name"] == f"submit-{held['metadata']['name']}"


def test_given_default_app_then_job_staging_and_tensorboard_are_applied_and_valid(training_json):
    objs = manifests_of(training_json)
    for obj in objs:
        if obj["metadata"].get("namespace") == "training" and not obj["apiVersion"].startswith(
            ("batch.volcano.sh", "scheduling.volcano.sh", "monitoring.coreos.com")
        ):
            validate_k8s(obj, "1.36")
    service = next(o for o in objs if o["kind"] == "Service" and o["metadata"]["name"] == "tensorboard")
    assert service["spec"]["type"] == "ClusterIP"
    assert not any(o["kind"] == "Service" and o["spec"].get("type") == "LoadBalancer" for o in objs)
    deployment = next(o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == "tensorboard")
    assert deployment["spec"]["template"]["spec"]["nodeSelector"] == {"trainium-eks/pool": "system"}
    staging = next(
        o for o in objs if o["kind"] == "Job" and o["metadata"]["name"].startswith("stage-dataset-")
    )
    run = json.loads(staging["spec"]["template"]["spec"]["containers"][0]["command"][3])
    script = run["command"][2]
    assert "s3://neuron-s3/training_datasets/" in script and "--no-sign-request" in script
    assert "if [ -f /data/datasets/bert-wikicorpus-seq128/.staged ]; then" in script
    outputs = training_json["Outputs"]
    values = [str(o["Value"]) for o in outputs.values()]
    assert any(v.startswith("kubectl logs -n training -f trn-bert-") for v in values)
    assert any("kubectl port-forward -n training svc/tensorboard 6006:6006" == v for v in values)
    assert any(v.endswith("-- neuron-top") for v in values)
    assert any(v.startswith("kubectl get vcjob -n training trn-bert-") for v in values)


def test_given_default_job_then_the_grace_period_outlasts_torchruns_window_and_the_state_fits_it(default_job):
    from trainium_eks.config import PlatformConfig
    from trainium_eks.storage.fsx import resolved_throughput
    from trainium_job.stop_budget import DEFAULT_FSX_MB_S_PER_TIB, DEFAULT_FSX_STORAGE_GIB, stop_problem

    pod = default_job.job["spec"]["tasks"][0]["template"]["spec"]
    env = {e["name"] for e in pod["containers"][0]["env"]}
    # torch 2.9.0 reads no shutdown-timeout variable: torchrun waits 30 s, the kubelet 15 s more.
    assert "TORCH_ELASTIC_SHUTDOWN_TIMEOUT" not in env
    assert pod["terminationGracePeriodSeconds"] == 45
    # The default (bf16) state fits on the file system the platform deploys by default.
    defaults = PlatformConfig()
    assert (
        defaults.fsx_deployment_type == "PERSISTENT_2" and defaults.fsx_storage_gib == DEFAULT_FSX_STORAGE_GIB
    )
    assert (
        resolved_throughput(defaults.fsx_deployment_type, defaults.fsx_throughput_per_tib)
        == DEFAULT_FSX_MB_S_PER_TIB
    )
    assert stop_problem(fp32_state=False) is None


def test_given_only_the_submitters_deadline_changed_then_the_job_has_a_new_name():
    # The submitter's pod template cannot change under the same name (a batch Job's is immutable),
    # and the Volcano Job goes with the submitter that owns it: both must be new.
    def named(deadline_s: int) -> str:
        wait = Wait(what="phase 1's shards", ready="/data/datasets/x/.staged", deadline_s=deadline_s, why="t")
        tools = "123456789012.dkr.ecr.us-west-2.amazonaws.com/trn/training:tensorboard-abc"
        return job_stack(submit_image=tools, submit_waits=(wait,)).job_name

    assert named(3000) == named(3000) != named(3600)
