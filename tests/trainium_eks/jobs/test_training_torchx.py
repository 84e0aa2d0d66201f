"""The TorchX component runs the construct's pod (TorchX's own kubernetes dry run, whole dicts)."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Any

import pytest

from tests.trainium_eks.jobs.training_support import job_stack
from trainium_job.naming import TASK_NAME
from trainium_job.pod import rank0_endpoint

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
