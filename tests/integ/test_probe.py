"""The acceptance probe's verdict on recorded Kubernetes answers, and its EKS token."""

from __future__ import annotations

import base64
import json
import urllib.parse
from typing import Any

import botocore.session

from tests.integ.probe.handler import eks_token, expected_verdict, probe

ENV = {
    "NAMESPACE": "training",
    "JOB_NAME": "trn-integ-083018fb",
    "NODES": "2",
    "TASK_NAME": "worker",
    "CONTAINER": "trainer",
    "CLAIM_NAME": "fsx-claim",
    "PROBE_JOB": "integ-fsx-probe",
    "NODE_SELECTOR": "trainium-eks/pool=trainium",
    "ALLOCATABLE": json.dumps({"aws.amazon.com/neuron": "16", "vpc.amazonaws.com/efa": "8"}),
}
RANK0_LOG = (
    "ip-10-0-1-7:12:40 [0] NCCL INFO NET/OFI Selected provider is efa, fabric is efa (found 8 nics)\n"
    "step 20 | loss 7.912 | lr 0.0001\n"
    '2026-11-30 10:00:00 [rank 0] INFO training.trainer.pretrain: done: {"start_step": 0, "final_loss": 7.912}\n'
)
RANK1_LOG = "ip-10-0-1-9:12:40 [0] NCCL INFO NET/OFI Selected Provider is efa (found 8 nics)\n"
PROBE_LOG = "marker: 500 shards\n10.0.1.20@tcp:/abcdefgh /data lustre ro,flock,lazystatfs 0 0\n"


def node(name: str, ready: str = "True", neuron: str = "16", efa: str = "8") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"trainium-eks/pool": "trainium"}},
        "status": {
            "allocatable": {"aws.amazon.com/neuron": neuron, "vpc.amazonaws.com/efa": efa, "cpu": "127"},
            "conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": ready}],
        },
    }


class FakeApi:
    """Path -> answer, as the Kubernetes API serves them (absent paths: None, like a 404)."""

    def __init__(self, objects: dict[str, Any], logs: dict[str, str]) -> None:
        self.objects, self.logs, self.paths = objects, logs, []

    def get(self, path: str) -> dict[str, Any] | None:
        self.paths.append(path)
        return self.objects.get(path)

    def text(self, path: str) -> str | None:
        self.paths.append(path)
        return self.logs.get(path)


def finished_run(**changes: Any) -> FakeApi:
    ns, job = "training", ENV["JOB_NAME"]
    objects = {
        "/api/v1/nodes?labelSelector=trainium-eks%2Fpool%3Dtrainium": {"items": [node("a"), node("b")]},
        f"/api/v1/namespaces/{ns}/persistentvolumeclaims/fsx-claim": {"status": {"phase": "Bound"}},
        f"/api/v1/namespaces/{ns}/pods?labelSelector=job-name%3Dinteg-fsx-probe": {
            "items": [
                {"metadata": {"name": "integ-fsx-probe-x1", "creationTimestamp": "2026-11-30T09:00:00Z"}}
            ]
        },
        f"/apis/batch.volcano.sh/v1alpha1/namespaces/{ns}/jobs/{job}": {
            "status": {"state": {"phase": "Completed"}}
        },
    }
    logs = {
        f"/api/v1/namespaces/{ns}/pods/integ-fsx-probe-x1/log": PROBE_LOG,
        f"/api/v1/namespaces/{ns}/pods/{job}-worker-0/log?container=trainer": RANK0_LOG,
        f"/api/v1/namespaces/{ns}/pods/{job}-worker-1/log?container=trainer": RANK1_LOG,
    }
    objects.update(changes.get("objects", {}))
    logs.update(changes.get("logs", {}))
    return FakeApi(objects, logs)


def test_given_a_finished_run_when_probed_then_the_verdict_is_the_expected_one():
    verdict, details = probe(finished_run(), ENV)
    assert verdict == expected_verdict(2)
    assert details["final_loss"] == 7.912
    assert len(details["efa_lines"]) == 2


def test_given_a_run_in_progress_when_probed_then_the_verdict_says_what_is_missing():
    api = finished_run(
        objects={
            "/api/v1/nodes?labelSelector=trainium-eks%2Fpool%3Dtrainium": {
                "items": [node("a"), node("b", efa="0"), node("c", ready="False")]
            },
            "/apis/batch.volcano.sh/v1alpha1/namespaces/training/jobs/trn-integ-083018fb": {
                "status": {"state": {"phase": "Running"}}
            },
        },
        logs={
            "/api/v1/namespaces/training/pods/trn-integ-083018fb-worker-1/log?container=trainer": "no efa here"
        },
    )
    verdict, _ = probe(api, ENV)
    assert verdict["trainium_nodes_ready"] == 1  # b lacks its EFA interfaces, c is not Ready
    assert verdict["job"] == "Running"
    assert verdict["efa_in_use"] is False
    assert verdict != expected_verdict(2)


def test_given_nothing_deployed_when_probed_then_absent_everywhere_not_an_error():
    verdict, _ = probe(FakeApi({}, {}), ENV)
    assert verdict == {
        "trainium_nodes_ready": 0,
        "claim": "absent",
        "fsx_mounted": False,
        "dataset_marker": False,
        "job": "absent",
        "final_loss_logged": False,
        "efa_in_use": False,
    }


def test_given_credentials_when_a_token_is_made_then_it_is_a_presigned_sts_call_bound_to_the_cluster(
    monkeypatch,
):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    token = eks_token("trn-integ", "us-west-2", botocore.session.get_session())
    assert token.startswith("k8s-aws-v1.")
    encoded = token.removeprefix("k8s-aws-v1.")
    url = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
    assert url.startswith("https://sts.us-west-2.amazonaws.com/?")
    assert query["Action"] == ["GetCallerIdentity"]
    assert "x-k8s-aws-id" in query["X-Amz-SignedHeaders"][0].split(";")
    assert query["X-Amz-Expires"] == ["60"]
