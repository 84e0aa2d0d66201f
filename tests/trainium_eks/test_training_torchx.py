"""The TorchX component builds the same pod as the construct (TorchX's own kubernetes dry run)."""

from __future__ import annotations

import re
import warnings

import pytest

from tests.trainium_eks.training_support import job_stack

pytest.importorskip("torchx")


def _quantity_mb(value: str) -> int:
    number = int(re.match(r"^\d+", value).group())
    return number * 1024 * 1024 // 1_000_000 if value.endswith("Mi") else number


def test_given_same_recipe_then_torchx_and_construct_agree():
    from kubernetes import client
    from torchx.schedulers.kubernetes_scheduler import create_scheduler

    from training.torchx_component import trn_dist_ddp

    image = "123456789012.dkr.ecr.us-west-2.amazonaws.com/trn/training:training-abc"
    app = trn_dist_ddp(image=image, claim="fsx-claim")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        info = create_scheduler("test").submit_dryrun(
            app, {"queue": "training", "namespace": "training", "validate_spec": False}
        )
    tx = client.ApiClient().sanitize_for_serialization(info.request.resource)
    ours = job_stack().job

    tx_spec, our_spec = tx["spec"], ours["spec"]
    assert tx_spec["maxRetry"] == our_spec["maxRetry"] == 3
    assert len(tx_spec["tasks"]) == our_spec["tasks"][0]["replicas"] == 2
    tx_task = tx_spec["tasks"][0]
    assert tx_task["policies"] == our_spec["policies"]
    tx_pod, our_pod = tx_task["template"]["spec"], our_spec["tasks"][0]["template"]["spec"]
    (txc,), (oc,) = tx_pod["containers"], our_pod["containers"]

    # Command: identical apart from the rendezvous host and id (TorchX: one task per replica).
    def normal(cmd: list[str]) -> list[str]:
        text = re.sub(r"--rdzv_endpoint \S+", "--rdzv_endpoint EP", cmd[-1])
        return cmd[:-1] + [re.sub(r"--rdzv_id \S+", "--rdzv_id ID", text)]

    assert normal(txc["command"]) == normal(oc["command"])
    assert "-worker-0-0." in txc["command"][-1]

    tx_env = {e["name"]: e["value"] for e in txc["env"] if not e["name"].startswith("TORCHX_")}
    assert tx_env == {e["name"]: e["value"] for e in oc["env"]}

    for device in ("aws.amazon.com/neuron", "vpc.amazonaws.com/efa"):
        assert txc["resources"]["limits"][device] == oc["resources"]["limits"][device]
    assert txc["resources"]["limits"]["cpu"] == oc["resources"]["limits"]["cpu"]
    assert (
        abs(
            _quantity_mb(txc["resources"]["limits"]["memory"])
            - _quantity_mb(oc["resources"]["limits"]["memory"])
        )
        <= 1
    )

    def mounts(pod, container):
        sources = {v["name"]: {k: v[k] for k in v if k != "name"} for v in pod["volumes"]}
        return {m["mountPath"]: sources[m["name"]] for m in container["volumeMounts"]}

    tx_mounts = mounts(tx_pod, txc)
    assert tx_mounts["/data"]["persistentVolumeClaim"]["claimName"] == "fsx-claim"
    assert {p: set(s) for p, s in tx_mounts.items()} == {p: set(s) for p, s in mounts(our_pod, oc).items()}
    assert tx_pod["tolerations"] == our_pod["tolerations"]
    assert tx_pod["nodeSelector"] == our_pod["nodeSelector"]
    # Hardening: the same securityContext (capabilities, seccomp, no escalation) on both.
    assert tx_pod["securityContext"] == our_pod["securityContext"]
    assert txc["securityContext"] == oc["securityContext"]
    assert oc["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["IPC_LOCK"]}
