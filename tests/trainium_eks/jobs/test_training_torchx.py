"""The TorchX component runs the construct's pod (TorchX's own kubernetes dry run, whole dicts)."""

from __future__ import annotations

import json
import re
import shlex
import warnings
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest

from tests.trainium_eks.jobs.training_support import bare_cluster, job_stack
from trainium_eks.jobs.trainium_training_job import JobImage, TrainiumTrainingJob
from trainium_eks.nodes.gang_wait import gang_wait_floor
from trainium_job.errors import ConfigError
from trainium_job.instances import instance_facts
from trainium_job.naming import TASK_NAME
from trainium_job.pod import RUNTIME_DIR, rank0_endpoint
from trainium_job.pod_program.description import JobDescription, loads
from trainium_job.program_job import ProgramJobSpec, TrainingCommand

pytest.importorskip("torchx")

IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/trn/training:training-abc"


#: What the README's ``torchx run`` command names.
COMPONENT = "trainium_job/torchx_component.py:trn_dist_ddp"


def _component() -> Any:
    """The component as ``torchx run`` finds it (TorchX's own finder and linter)."""
    from torchx.specs.finder import get_component

    found = get_component(COMPONENT)
    assert found.validation_errors == []
    return found.fn


def _dry_run(*script_args: str, **kwargs: Any) -> dict[str, Any]:
    from kubernetes import client
    from torchx.schedulers.kubernetes_scheduler import create_scheduler

    app = _component()(*script_args, image=IMAGE, claim="fsx-claim", **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        info = create_scheduler("test").submit_dryrun(
            app, {"queue": "training", "namespace": "training", "validate_spec": False}
        )
    return client.ApiClient().sanitize_for_serialization(info.request.resource)


def _without_identity(pod_spec: dict[str, Any], *, endpoint: str, job: str, rdzv_id: str) -> dict[str, Any]:
    """The pod spec with the only per-launcher values replaced by placeholders: rank 0's host name
    (in the endpoint and the store-host decision of the pod program's description), the job's name
    and the rendezvous id (TorchX makes one task per replica: node 0 is ``<app>-worker-0-0``, and
    the id stays the default, ``bert-pretrain``). The description is JSON inside the container's
    command, so its strings appear here with escaped quotes."""
    text = json.dumps(pod_spec).replace(endpoint, "RANK0:PORT")
    host = endpoint.split(".")[0]  # the store-host decision names rank 0's pod (launch.c10d_store_host)
    text = text.replace(f'\\"host\\":\\"{host}\\"', '\\"host\\":\\"RANK0\\"')
    text = text.replace(f'\\"job\\":\\"{job}\\"', '\\"job\\":\\"JOB\\"')
    return json.loads(re.sub(rf'\\"{re.escape(rdzv_id)}(?=\\"|-)', r'\\"ID', text))


@pytest.mark.parametrize(
    "spec",
    [{}, {"max_steps": 1000, "run_name": "trial", "max_restarts": 1, "script_args": {"lr": "4e-4"}}],
)
def test_given_same_spec_then_torchx_pod_equals_the_construct_pod_whole(spec):
    torchx_args = {
        ("max_retries" if k == "max_retry" else k): v for k, v in spec.items() if k != "script_args"
    }
    extra = [a for k, v in spec.get("script_args", {}).items() for a in (f"--{k}", v)]
    tx = _dry_run(*extra, **torchx_args)
    job = job_stack(**spec)
    ours = job.job

    app = tx["metadata"]["name"]
    tasks = tx["spec"]["tasks"]
    assert [t["name"] for t in tasks] == [
        f"{TASK_NAME}-{i}" for i in range(ours["spec"]["tasks"][0]["replicas"])
    ]
    our_pod = _without_identity(
        ours["spec"]["tasks"][0]["template"]["spec"],
        endpoint=rank0_endpoint(job.job_name),
        job=job.job_name,
        rdzv_id=job.job_name,
    )
    for task in tasks:
        tx_pod = _without_identity(
            task["template"]["spec"],
            endpoint=rank0_endpoint("${app_id}", task_pod=f"{TASK_NAME}-0-0").replace("${app_id}", app),
            job=app,
            rdzv_id="bert-pretrain",
        )
        assert tx_pod == our_pod
        # TorchX renders only its restart policies (per task); the AbortJob on the fabric check's, a
        # deadline's and the ceiling's exit codes is the CDK job's: a TorchX job restarts on them
        # until its retries run out.
        assert task["policies"] == [p for p in ours["spec"]["policies"] if "event" in p]
        assert ours["spec"]["policies"][0] == {"exitCode": 69, "action": "AbortJob"}
        labels = task["template"]["metadata"]["labels"]
        assert (
            labels["app.kubernetes.io/name"]
            == ours["spec"]["tasks"][0]["template"]["metadata"]["labels"]["app.kubernetes.io/name"]
        )
    for key in ("schedulerName", "queue", "maxRetry", "plugins"):
        assert tx["spec"][key] == ours["spec"][key]
    assert "RANK0:PORT" in our_pod["containers"][0]["command"][3]


def test_given_readme_command_then_it_names_the_component_torchx_finds():
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    assert f"{COMPONENT} --image" in readme
    assert _component().__name__ == "trn_dist_ddp"


def test_given_bad_torchx_argument_then_the_spec_error_names_the_key():
    from trainium_job.errors import ConfigError
    from trainium_job.torchx_component import trn_dist_ddp

    with pytest.raises(ConfigError) as err:
        trn_dist_ddp(image=IMAGE, global_batch=1000)
    assert err.value.field_name == "training_global_batch"
    with pytest.raises(ConfigError, match="use training_max_steps"):
        trn_dist_ddp("--max_steps", "10", image=IMAGE)
    with pytest.raises(ConfigError, match="'--name value' or '--switch'"):
        trn_dist_ddp("lr", "4e-4", image=IMAGE)


def test_given_flags_then_values_and_switches_become_the_spec_mapping():
    from trainium_job.torchx_component import flags_to_mapping

    assert flags_to_mapping(["--lr", "4e-4", "--fp32_master_weights", "--seed=7"]) == {
        "lr": "4e-4",
        "fp32_master_weights": True,
        "seed": "7",
    }


# --- trn_program: a job of the user's own program, as TrainiumTrainingJob runs it ---------------

#: What the component's docstring's ``torchx run`` line names.
PROGRAM_COMPONENT = "trainium_job/torchx_component.py:trn_program"
DIGEST_IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/mine/train@sha256:" + "ab" * 32
TOOLS_IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/trn/training:tools-abc"
#: The component's default rendezvous id (TorchX's app name): the CDK job's is the job's name.
PROGRAM_RDZV_ID = "trn-bert"


def _program_dry_run(*script_args: str, **kwargs: Any) -> dict[str, Any]:
    """``trn_program`` as ``torchx run`` finds it, through TorchX's own kubernetes dry run."""
    from kubernetes import client
    from torchx.schedulers.kubernetes_scheduler import create_scheduler
    from torchx.specs.finder import get_component

    found = get_component(PROGRAM_COMPONENT)
    assert found.validation_errors == []
    app = found.fn(*script_args, **{"image": DIGEST_IMAGE, "run_name": "my-run", **kwargs})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        info = create_scheduler("test").submit_dryrun(
            app, {"queue": "training", "namespace": "training", "validate_spec": False}
        )
    return client.ApiClient().sanitize_for_serialization(info.request.resource)


def _program_construct(spec: ProgramJobSpec, *, has_library: bool, **props: Any) -> TrainiumTrainingJob:
    """``TrainiumTrainingJob`` of ``spec`` on a bare cluster (2 x trn1.32xlarge, the tools image given)."""
    cluster = bare_cluster()
    return TrainiumTrainingJob(
        cdk.Stack.of(cluster),
        "Job",
        cluster=cluster,
        facts=instance_facts("trn1.32xlarge"),
        nodes=2,
        spec=spec,
        image=JobImage(uri=DIGEST_IMAGE, key=DIGEST_IMAGE, has_library=has_library),
        claim_name="fsx-claim",
        tools_image=TOOLS_IMAGE,
        **props,
    )


def _placeholders(pod_spec: dict[str, Any], *, job: str, endpoint: str, rdzv_id: str) -> dict[str, Any]:
    """``pod_spec`` with its per-launcher values as placeholders: rank 0's endpoint and host (TorchX
    makes one task per replica, node 0 is ``<app>-worker-0-0``), the rendezvous id (torchrun's
    ``--rdzv_id`` value, alone or with its ``-precompile``/``-fabric-check`` suffix) and the job's
    name. The description is JSON inside the container's command: its quotes are escaped here."""
    text = json.dumps(pod_spec).replace(endpoint, "RANK0:PORT")
    host = endpoint.split(".")[0]
    text = text.replace(f'\\"host\\":\\"{host}\\"', '\\"host\\":\\"RANK0\\"')
    text = text.replace(f'\\"--rdzv_id\\",\\"{rdzv_id}', '\\"--rdzv_id\\",\\"ID')
    return json.loads(text.replace(job, "JOB"))


def _program_pods(
    tx: dict[str, Any], job: TrainiumTrainingJob
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """TorchX's pods (one task per replica) and the construct's, each with placeholders."""
    app = tx["metadata"]["name"]
    tx_pods = [
        _placeholders(
            task["template"]["spec"],
            job=app,
            endpoint=rank0_endpoint(app, task_pod=f"{TASK_NAME}-0-0"),
            rdzv_id=PROGRAM_RDZV_ID,
        )
        for task in tx["spec"]["tasks"]
    ]
    ours = _placeholders(
        job.job["spec"]["tasks"][0]["template"]["spec"],
        job=job.job_name,
        endpoint=rank0_endpoint(job.job_name),
        rdzv_id=job.job_name,
    )
    return tx_pods, ours


def _described(pod_spec: dict[str, Any]) -> JobDescription:
    (container,) = pod_spec["containers"]
    return loads(container["command"][-1])


PROGRAM_CASES = {
    # An image without the library: its programs come from the tools image; a ceiling counted as
    # the CDK job counts it (each node's start = the gang wait's floor).
    "script-tools-budget": (
        ("--steps", "100", "--lr=3e-4"),
        {"script": "/app/train.py", "tools_image": TOOLS_IMAGE, "budget_usd": 100},
        {"command": {"script": "/app/train.py", "args": ("--steps", "100", "--lr=3e-4")}},
        {"has_library": False, "budget_usd": 100},
    ),
    # An image with the library: a module, a precompile into a cache set, its own variables.
    "module-library-precompile": (
        ("--epochs", "2"),
        {
            "module": "my_project.train",
            "nproc_per_node": 16,
            "cache_set": "my-cache",
            "precompile": "--epochs 1 --max_steps 5",
            "fabric_check": False,
            "max_restarts": 1,
            "max_retries": 2,
            "env": {"MY_SEED": "7", "HF_HOME": "/data/hf"},
        },
        {
            "command": {"module": "my_project.train", "args": ("--epochs", "2")},
            "nproc_per_node": 16,
            "cache_set": "my-cache",
            "precompile": {"module": "my_project.train", "args": ("--epochs", "1", "--max_steps", "5")},
            "fabric_check": False,
            "max_restarts": 1,
            "max_retry": 2,
            "env": {"MY_SEED": "7", "HF_HOME": "/data/hf"},
        },
        {"has_library": True},
    ),
}


def _program_spec(fields: dict[str, Any]) -> ProgramJobSpec:
    fields = dict(fields)
    fields["command"] = TrainingCommand(**fields["command"])
    if "precompile" in fields:
        fields["precompile"] = TrainingCommand(**fields["precompile"])
    return ProgramJobSpec(run_name="my-run", **fields)


@pytest.mark.parametrize("case", list(PROGRAM_CASES))
def test_given_same_program_then_torchx_pod_equals_the_trainium_training_job_pod_whole(case):
    # Given the same program for TorchX and for the CDK job (the CDK job counts each node's start
    # from the gang wait's floor: TorchX is given those minutes)
    script_args, torchx_args, spec_fields, props = PROGRAM_CASES[case]
    if "budget_usd" in torchx_args:
        floor = gang_wait_floor(instance_facts("trn1.32xlarge"), health_check=True)
        torchx_args = {**torchx_args, "node_start_minutes": floor.minutes}
    # When TorchX renders its job and the construct its own
    tx = _program_dry_run(*script_args, **torchx_args)
    job = _program_construct(_program_spec(spec_fields), **props)
    # Then every TorchX pod is the construct's, whole, but for the job's name, node 0's host and
    # the rendezvous id
    tx_pods, ours = _program_pods(tx, job)
    assert len(tx_pods) == job.job["spec"]["tasks"][0]["replicas"] == 2
    for pod in tx_pods:
        assert pod == ours
    # and its description is the construct's (the pod program's own parser reads it), its ceiling too
    assert _described(tx_pods[0]) == _described(ours)
    assert _described(tx_pods[0]).budget == job.description.budget
    assert (job.description.budget is not None) == ("budget_usd" in torchx_args)
    labels = tx["spec"]["tasks"][0]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/name"] == job.job["metadata"]["labels"]["app.kubernetes.io/name"]
    assert tx["spec"]["maxRetry"] == job.job["spec"]["maxRetry"]


@pytest.mark.parametrize("tools_image", ["", TOOLS_IMAGE])
def test_given_tools_image_or_not_then_the_runtime_init_container_is_there_iff_given(tools_image):
    # Given a script, with or without the library's tools image
    tx = _program_dry_run(script="/app/train.py", tools_image=tools_image)
    # When its pods are read
    for task in tx["spec"]["tasks"]:
        pod = task["template"]["spec"]
        inits = pod.get("initContainers", [])
        # Then the tools image's init container fills the runtime volume iff it was given, and the
        # pod program runs from there
        assert [c["image"] for c in inits] == ([tools_image] if tools_image else [])
        assert (_described(pod).runtime == RUNTIME_DIR) == bool(tools_image)
        assert ("runtime" in [v["name"] for v in pod["volumes"]]) == bool(tools_image)


def test_given_script_and_args_on_the_torchx_command_line_then_they_reach_torchrun_argv():
    from torchx.specs.builders import materialize_appdef
    from torchx.specs.finder import get_component

    # Given the docstring's command line, parsed by TorchX's own argument parser (torchx run):
    # torchrun takes "[options] training_script [training_script_args]" and, with -m, the module's
    # name as the script (torch/distributed/run.py, get_args_parser, v2.9.0)
    fn = get_component(PROGRAM_COMPONENT).fn
    base = ["--image", DIGEST_IMAGE, "--run_name", "my-run"]
    for argv, tail in (
        (["--script", "/app/train.py", "--", "--steps", "100"], ["/app/train.py", "--steps", "100"]),
        (
            ["--module", "my_project.train", "--", "--steps", "100"],
            ["-m", "my_project.train", "--steps", "100"],
        ),
    ):
        # When TorchX builds the app
        app = materialize_appdef(fn, [*base, "--env", "A=1,B=2", *argv])
        (phase,) = loads(app.roles[0].args[-1]).phases
        # Then the program and its arguments end torchrun's command, and the variables reach it
        assert phase.train[0] == "torchrun" and list(phase.train[-len(tail) :]) == tail
        assert ("A", "1") in phase.env and ("B", "2") in phase.env
    # and a precompile given as one shell-split string runs the same program with its arguments
    app = materialize_appdef(
        fn, [*base, "--script", "/app/train.py", "--cache_set", "c1", "--precompile=--steps 10"]
    )
    (phase,) = loads(app.roles[0].args[-1]).phases
    assert phase.precompile is not None
    assert list(phase.precompile.argv[-3:]) == ["/app/train.py", "--steps", "10"]


def _commands(text: str) -> list[str]:
    """The ``torchx run`` commands of ``text`` naming a component of ours, continuation lines joined."""
    joined = re.sub(r"\\\s*\n\s*", " ", text)
    return [
        line.strip()
        for line in joined.splitlines()
        if "torchx run" in line and "torchx_component.py:" in line
    ]


def test_given_the_readme_and_docstring_torchx_commands_then_torchx_parses_their_arguments():
    from torchx.specs.builders import materialize_appdef
    from torchx.specs.finder import get_component

    import trainium_job.torchx_component as component

    # Given the documented commands, their placeholders given values
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    commands = _commands(readme) + _commands(component.__doc__ or "")
    assert {c.split("torchx_component.py:")[1].split()[0] for c in commands} == {
        "trn_dist_ddp",
        "trn_program",
    }
    for command in commands:
        words = shlex.split(re.sub(r"<[^>]*>", "x", command))
        name = next(w for w in words if "torchx_component.py:" in w)
        # When TorchX's own parser reads the component's arguments (as torchx run does)
        app = materialize_appdef(get_component(name).fn, words[words.index(name) + 1 :])
        # Then it builds the app
        assert app.roles[0].num_replicas == 2


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"script": "/app/train.py", "module": "my.train"}, "command"),
        ({}, "command"),
        ({"script": "train.py"}, "command.script"),
        ({"script": "/app/train.py", "nnodes": 0}, "nnodes"),
        ({"script": "/app/train.py", "nnodes": 2, "instance_type": "trn1.2xlarge"}, "nnodes"),
        ({"script": "/app/train.py", "instance_type": "p5.48xlarge"}, "instance_type"),
        ({"script": "/app/train.py", "nproc_per_node": 64}, "nproc_per_node"),
        ({"script": "/app/train.py", "nproc_per_node": -1}, "nproc_per_node"),
        ({"script": "/app/train.py", "max_restarts": -1}, "max_restarts"),
        ({"script": "/app/train.py", "run_name": "My Run"}, "run_name"),
        ({"script": "/app/train.py", "precompile": "--steps 3"}, "cache_set"),
        ({"script": "/app/train.py", "budget_usd": -5}, "budget_usd"),
        ({"script": "/app/train.py", "budget_usd": 10, "instance_type": "trn2.48xlarge"}, "budget_usd"),
        ({"script": "/app/train.py", "node_start_minutes": -1}, "node_start_minutes"),
        ({"script": "/app/train.py", "env": {"TRAINIUM_JOB_NAME": "x"}}, "env"),
    ],
)
def test_given_bad_program_arguments_then_one_config_error_line_names_the_argument(kwargs, field):
    from trainium_job.torchx_component import trn_program

    # Given a bad argument, when the component builds its app, then one ConfigError line names it
    with pytest.raises(ConfigError) as err:
        trn_program(**{"image": DIGEST_IMAGE, "run_name": "my-run", **kwargs})
    assert err.value.field_name == field
    assert "\n" not in str(err.value)
