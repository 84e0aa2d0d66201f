"""The acceptance probe: one look at the cluster, as a Lambda function the integ assertion polls.

Standard library and the Lambda runtime's boto3 only (it is deployed as this one file). It asks
the Kubernetes API (read-only access entry, AmazonEKSAdminViewPolicy) for what ``make integ``
accepts, and answers a verdict that equals :func:`expected_verdict` once the run is done:

- Trainium nodes Ready with allocatable ``aws.amazon.com/neuron`` and ``vpc.amazonaws.com/efa``
  as the instance facts say;
- the FSx claim Bound, and the probe Job's log showing the Lustre mount at /data and the
  dataset marker;
- the Volcano Job Completed, rank 0's log with its final loss (``training.trainer.pretrain`` logs
  ``done: {... "final_loss": ...}``), and every worker's log with the libfabric provider line of
  the Neuron collectives' OFI plugin (aws-ofi-nccl ``src/nccl_ofi_net.cpp``: "NET/OFI Selected
  provider is %s, fabric is %s (found %d nics)"; "Selected Provider is %s (found %d nics)" before
  2025-02), printed at NCCL_DEBUG=INFO.

What it saw in detail goes to the function's log, the verdict to the assertion.
"""

from __future__ import annotations

import base64
import json
import os
import re
import ssl
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Protocol

#: The OFI plugin's provider line, old and new spelling, when the provider is EFA.
EFA_PROVIDER_LINE = re.compile(r"NET/OFI Selected [Pp]rovider is efa\b")
#: The summary training.trainer.pretrain logs at the end of a run (final_loss null: no step logged).
FINAL_LOSS = re.compile(r'done: \{.*"final_loss": (-?[0-9][0-9.eE+-]*)')
#: What the probe Job prints (see the integ app's probe Job script).
MARKER_LINE = re.compile(r"^marker: ", re.MULTILINE)
LUSTRE_MOUNT = re.compile(r"^\S+ /data lustre ", re.MULTILINE)


def expected_verdict(nodes: int) -> dict[str, Any]:
    """The verdict of a deployment that works (the integ assertion expects exactly this)."""
    return {
        "trainium_nodes_ready": nodes,
        "claim": "Bound",
        "fsx_mounted": True,
        "dataset_marker": True,
        "job": "Completed",
        "final_loss_logged": True,
        "efa_in_use": True,
    }


class Api(Protocol):
    """Read access to the Kubernetes API: JSON objects and pod logs (None when absent)."""

    def get(self, path: str) -> dict[str, Any] | None: ...

    def text(self, path: str) -> str | None: ...


def _ready(node: dict[str, Any]) -> bool:
    conditions = node.get("status", {}).get("conditions", [])
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def probe(api: Api, env: dict[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(verdict, details) of one look at the cluster. ``env`` holds the function's settings."""
    ns, job, nodes = env["NAMESPACE"], env["JOB_NAME"], int(env["NODES"])
    allocatable = json.loads(env["ALLOCATABLE"])
    selector = urllib.parse.quote(env["NODE_SELECTOR"], safe="")
    listed = (api.get(f"/api/v1/nodes?labelSelector={selector}") or {}).get("items", [])
    seen = {
        n["metadata"]["name"]: {k: n.get("status", {}).get("allocatable", {}).get(k) for k in allocatable}
        for n in listed
    }
    ready = [
        n["metadata"]["name"]
        for n in listed
        if _ready(n) and all(seen[n["metadata"]["name"]][k] == v for k, v in allocatable.items())
    ]
    claim = api.get(f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{env['CLAIM_NAME']}") or {}
    probe_log = _job_log(api, ns, env["PROBE_JOB"]) or ""
    vcjob = api.get(f"/apis/batch.volcano.sh/v1alpha1/namespaces/{ns}/jobs/{job}") or {}
    phase = vcjob.get("status", {}).get("state", {}).get("phase", "absent")
    worker_logs = [
        api.text(
            f"/api/v1/namespaces/{ns}/pods/{job}-{env['TASK_NAME']}-{i}/log?container={env['CONTAINER']}"
        )
        or ""
        for i in range(nodes)
    ]
    loss = FINAL_LOSS.search(worker_logs[0]) if worker_logs else None
    verdict = {
        "trainium_nodes_ready": len(ready),
        "claim": claim.get("status", {}).get("phase", "absent"),
        "fsx_mounted": bool(LUSTRE_MOUNT.search(probe_log)),
        "dataset_marker": bool(MARKER_LINE.search(probe_log)),
        "job": phase,
        "final_loss_logged": loss is not None,
        "efa_in_use": bool(worker_logs) and all(EFA_PROVIDER_LINE.search(log) for log in worker_logs),
    }
    details = {
        "nodes": seen,
        "probe_log": probe_log[-2000:],
        "final_loss": float(loss.group(1)) if loss else None,
        "efa_lines": [m.group(0) for log in worker_logs for m in EFA_PROVIDER_LINE.finditer(log)][:4],
    }
    return verdict, details


def _job_log(api: Api, ns: str, job: str) -> str | None:
    """The log of the newest pod of batch/v1 Job ``job``."""
    pods = (api.get(f"/api/v1/namespaces/{ns}/pods?labelSelector=job-name%3D{job}") or {}).get("items", [])
    if not pods:
        return None
    newest = max(pods, key=lambda p: p["metadata"].get("creationTimestamp", ""))
    return api.text(f"/api/v1/namespaces/{ns}/pods/{newest['metadata']['name']}/log")


# --- talking to EKS ---------------------------------------------------------------------------


def eks_token(cluster: str, region: str, session: Any) -> str:
    """A bearer token for the cluster: ``k8s-aws-v1.`` + base64url of a presigned STS
    GetCallerIdentity URL signed with the ``x-k8s-aws-id: <cluster>`` header (the scheme of
    aws-iam-authenticator, which EKS runs; what ``aws eks get-token`` prints)."""
    from botocore.signers import RequestSigner

    sts = session.create_client("sts", region_name=region)
    signer = RequestSigner(
        sts.meta.service_model.service_id,
        region,
        "sts",
        "v4",
        session.get_credentials(),
        session.get_component("event_emitter"),
    )
    url = signer.generate_presigned_url(
        {
            "method": "GET",
            "url": f"https://sts.{region}.amazonaws.com/?Action=GetCallerIdentity&Version=2011-06-15",
            "body": {},
            "headers": {"x-k8s-aws-id": cluster},
            "context": {},
        },
        region_name=region,
        expires_in=60,
        operation_name="",
    )
    return "k8s-aws-v1." + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


class KubeApi:
    """:class:`Api` over HTTPS with the cluster's CA and a bearer token."""

    def __init__(self, endpoint: str, ca_pem: str, token: str) -> None:
        self.endpoint, self.token = endpoint.rstrip("/"), token
        self.tls = ssl.create_default_context(cadata=ca_pem)

    @classmethod
    def for_cluster(cls, cluster: str, region: str) -> KubeApi:
        import botocore.session

        session = botocore.session.get_session()
        described = session.create_client("eks", region_name=region).describe_cluster(name=cluster)["cluster"]
        ca_pem = base64.b64decode(described["certificateAuthority"]["data"]).decode()
        return cls(described["endpoint"], ca_pem, eks_token(cluster, region, session))

    def _read(self, path: str) -> bytes | None:
        request = urllib.request.Request(
            self.endpoint + path, headers={"Authorization": f"Bearer {self.token}"}
        )
        try:
            with urllib.request.urlopen(request, context=self.tls, timeout=20) as response:
                return bytes(response.read())
        except urllib.error.HTTPError as err:
            if err.code in (400, 404):  # absent, or a container not started yet
                return None
            raise

    def get(self, path: str) -> dict[str, Any] | None:
        body = self._read(path)
        return json.loads(body) if body is not None else None

    def text(self, path: str) -> str | None:
        body = self._read(path)
        return body.decode(errors="replace") if body is not None else None


def handler(event: Any, context: Any) -> dict[str, Any]:
    env = dict(os.environ)
    verdict, details = probe(KubeApi.for_cluster(env["CLUSTER_NAME"], env["AWS_REGION"]), env)
    print(json.dumps({"verdict": verdict, "details": details}, default=str))
    return verdict
