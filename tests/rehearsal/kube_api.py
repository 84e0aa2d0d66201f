"""The rehearsal's stand-in Kubernetes API server (and EC2 endpoint), and the scheduler's matching.

The server holds the rehearsal's Node objects and answers what the node health check's
``training.node.node_actions`` sends through the official client with the in-cluster config:
``GET /api/v1/nodes/<name>``; ``PATCH`` of a Node as a strategic-merge patch (labels merged, a null
deletes its key; ``spec.taints`` replaced, the field has no patch strategy: core/v1 ``NodeSpec``
in kubernetes/api core/v1/types.go; ``metadata.resourceVersion`` compared, 409 Conflict on a
mismatch as the API server's optimistic concurrency does); ``POST`` of an Event; ``POST`` of a
Volcano Job (``batch.volcano.sh/v1alpha1``, what the training job's submitter creates: kept, and
409 AlreadyExists for a second one of the same name, as the API server answers). EC2's query API on
``POST /`` answers ``TerminateInstances`` (botocore reaches it through ``AWS_ENDPOINT_URL_EC2``).
It speaks HTTPS with a self-signed certificate for its bridge address (made by ``openssl``), and
wants the ServiceAccount token as a bearer token. Every request is recorded; the tests validate
the Nodes and Events with the Kubernetes schemas (``tests.support.validate_k8s``).

The server part is standard library only: it runs as a program (this file) in the rehearsal's
network namespace, where the pods reach it on the bridge; the harness reads what it recorded
(``requests.jsonl``) and the Nodes as they are (``nodes.json``) from its folder.
"""

from __future__ import annotations

import json
import os
import secrets
import ssl
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

if __name__ != "__main__":  # the harness's side: the server itself runs isolated (python -I)
    from tests.rehearsal import bridge_server

#: Where the kubelet mounts the ServiceAccount's token, CA and namespace in a pod (the path the
#: official client's ``load_incluster_config`` reads, kubernetes-client/python
#: kubernetes/base/config/incluster_config.py ``SERVICE_TOKEN_FILENAME``).
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
#: The API's port (the ``kubernetes`` Service's port 443 on EKS).
PORT = 443
REQUESTS = "requests.jsonl"
NODES = "nodes.json"
#: The Volcano Jobs created, as the server keeps them.
VOLCANO_JOBS = "volcano-jobs.json"
#: Volcano's Job API path: ``/apis/<group>/<version>/namespaces/<ns>/jobs``.
VOLCANO_API = ["apis", "batch.volcano.sh", "v1alpha1", "namespaces"]


# --- the server (runs in the network namespace; standard library only) --------------------------


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "reason": reason,
        "message": message,
        "code": code,
    }


def strategic_merge(node: dict[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """``patch`` applied to ``node`` as the API server applies a strategic-merge patch to these
    fields: ``metadata.labels`` merged (a null deletes), ``spec.taints`` replaced."""
    out = json.loads(json.dumps(node))
    labels = {**out["metadata"].get("labels", {}), **patch.get("metadata", {}).get("labels", {})}
    out["metadata"]["labels"] = {k: v for k, v in labels.items() if v is not None}
    if "taints" in patch.get("spec", {}):
        out["spec"]["taints"] = patch["spec"]["taints"]
    out["metadata"]["resourceVersion"] = str(int(out["metadata"]["resourceVersion"]) + 1)
    return out


class _Server:
    def __init__(self, folder: Path, token: str) -> None:
        self.folder = folder
        self.token = token
        self.nodes: dict[str, dict[str, Any]] = json.loads((folder / NODES).read_text())
        self.jobs: dict[str, dict[str, Any]] = {}
        self.lock = threading.Lock()

    def record(self, entry: dict[str, Any]) -> None:
        with open(self.folder / REQUESTS, "a") as out:
            out.write(json.dumps({**entry, "time": time.time()}) + "\n")

    def save(self) -> None:
        for name, content in ((NODES, self.nodes), (VOLCANO_JOBS, self.jobs)):
            tmp = self.folder / (name + ".tmp")
            tmp.write_text(json.dumps(content))
            tmp.replace(self.folder / name)


def _handler(server: _Server) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _reply(self, code: int, body: Any, content_type: str = "application/json") -> None:
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _handle(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length).decode() if length else ""
            ec2 = method == "POST" and self.path == "/"
            body: Any = (
                {k: v[0] for k, v in parse_qs(raw).items()} if ec2 else (json.loads(raw) if raw else None)
            )
            # Header names are case-insensitive (RFC 9110 section 5.1): recorded in lower case.
            headers = {k.lower(): v for k, v in self.headers.items()}
            server.record({"method": method, "path": self.path, "headers": headers, "body": body})
            if ec2:
                self._ec2(body)
                return
            # Authentication schemes are case-insensitive (RFC 9110 section 11.1); the client
            # sends "bearer <token>" (kubernetes/base/config/incluster_config.py).
            scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
            if scheme.lower() != "bearer" or token != server.token:
                self._reply(401, _status(401, "Unauthorized", "no valid ServiceAccount token"))
                return
            with server.lock:
                code, answer = self._kube(method, body)
                if (method, code) in (("PATCH", 200), ("POST", 201)):
                    server.save()
            self._reply(code, answer)

        def _kube(self, method: str, body: Any) -> tuple[int, Any]:
            parts = self.path.split("?")[0].strip("/").split("/")
            if parts[:3] == ["api", "v1", "nodes"] and len(parts) == 4:
                node = server.nodes.get(parts[3])
                if node is None:
                    return 404, _status(404, "NotFound", f'nodes "{parts[3]}" not found')
                if method == "GET":
                    return 200, node
                if method == "PATCH":
                    if self.headers.get("Content-Type") != "application/strategic-merge-patch+json":
                        return 415, _status(
                            415, "UnsupportedMediaType", str(self.headers.get("Content-Type"))
                        )
                    sent = body.get("metadata", {}).get("resourceVersion")
                    if sent is not None and sent != node["metadata"]["resourceVersion"]:
                        return 409, _status(409, "Conflict", "the object has been modified")
                    server.nodes[parts[3]] = strategic_merge(node, body)
                    return 200, server.nodes[parts[3]]
            if method == "POST" and parts[:4] == VOLCANO_API and parts[5:] == ["jobs"]:
                return self._create_job(parts[4], body)
            if method == "POST" and parts[:3] == ["api", "v1", "namespaces"] and parts[4:] == ["events"]:
                created = json.loads(json.dumps(body))
                created["metadata"].update(uid=str(uuid.uuid4()), resourceVersion="1")
                return 201, created
            return 404, _status(404, "NotFound", f"{method} {self.path}: not served by the stand-in")

        def _create_job(self, namespace: str, body: Any) -> tuple[int, Any]:
            """A Volcano Job created in ``namespace``: 201 with its uid, or 409 for a name taken."""
            name = body.get("metadata", {}).get("name", "")
            if body.get("metadata", {}).get("namespace", namespace) != namespace:
                return 400, _status(
                    400, "BadRequest", "the namespace of the object does not match the request"
                )
            if name in server.jobs:
                return 409, _status(409, "AlreadyExists", f'jobs.batch.volcano.sh "{name}" already exists')
            created = json.loads(json.dumps(body))
            created["metadata"].update(namespace=namespace, uid=str(uuid.uuid4()), resourceVersion="1")
            server.jobs[name] = created
            return 201, created

        def _ec2(self, form: Mapping[str, str]) -> None:
            """EC2's query API (form-encoded ``Action``; ``InstanceId.N``), answering in its XML."""
            if form.get("Action") != "TerminateInstances":
                self._reply(
                    400,
                    "<Response><Errors><Error><Code>InvalidAction</Code></Error></Errors></Response>",
                    "text/xml",
                )
                return
            items = "".join(
                f"<item><instanceId>{v}</instanceId><currentState><code>32</code><name>shutting-down</name>"
                "</currentState><previousState><code>16</code><name>running</name></previousState></item>"
                for k, v in sorted(form.items())
                if k.startswith("InstanceId.")
            )
            xml = (
                '<TerminateInstancesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
                f"<requestId>{uuid.uuid4()}</requestId><instancesSet>{items}</instancesSet>"
                "</TerminateInstancesResponse>"
            )
            self._reply(200, xml, "text/xml;charset=UTF-8")

        def do_GET(self) -> None:
            self._handle("GET")

        def do_PATCH(self) -> None:
            self._handle("PATCH")

        def do_POST(self) -> None:
            self._handle("POST")

    return Handler


def serve(folder: Path, address: str, port: int) -> None:
    """Serve until stdin closes (the harness's end); prints ``ready`` once listening."""
    server = _Server(folder, (folder / "token").read_text())
    httpd = ThreadingHTTPServer((address, port), _handler(server))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(folder / "ca.crt", folder / "tls.key")
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    print("ready", flush=True)
    sys.stdin.read()
    httpd.shutdown()


# --- the harness's side ---------------------------------------------------------------------------


def node_object(name: str, labels: Mapping[str, str], instance_id: str) -> dict[str, Any]:
    """A Trainium Node as it registers: its labels, the Neuron and pending taints, the AWS cloud
    provider's ``spec.providerID`` (``aws:///<zone>/<instance>``)."""
    from trainium_job.node_health import PENDING_TAINT
    from trainium_job.scheduling import NEURON_TAINT

    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": str(uuid.uuid4()), "resourceVersion": "1", "labels": dict(labels)},
        "spec": {
            "providerID": f"aws:///us-west-2d/{instance_id}",
            "taints": [dict(NEURON_TAINT), dict(PENDING_TAINT)],
        },
    }


class KubeApi:
    """The stand-in API server, run by ``enter`` (a command prefix into the bridge's network
    namespace) on ``address``; its files (certificate, token, records) under ``folder``."""

    def __init__(
        self,
        folder: Path,
        enter: Sequence[str],
        address: str,
        nodes: Sequence[Mapping[str, Any]],
        preexec_fn: Callable[[], None] | None = None,
    ) -> None:
        self.folder = folder
        self.address = address
        folder.mkdir(parents=True)
        (folder / "token").write_text(secrets.token_urlsafe(32))
        (folder / "namespace").write_text("training")
        bridge_server.self_signed(folder, "kubernetes", [f"IP:{address}"])
        (folder / NODES).write_text(json.dumps({n["metadata"]["name"]: n for n in nodes}))
        self.proc = bridge_server.start(
            enter,
            __file__,
            [str(folder), address, str(PORT)],
            what="the stand-in API server",
            preexec_fn=preexec_fn,
        )

    def service_account(self, into: Path) -> Path:
        """The folder the kubelet mounts at :data:`SERVICE_ACCOUNT_DIR`: token, ca.crt, namespace."""
        into.mkdir(parents=True)
        for name in ("token", "ca.crt", "namespace"):
            (into / name).write_bytes((self.folder / name).read_bytes())
        return into

    def env(self) -> dict[str, str]:
        """What the kubelet sets in every container for the ``kubernetes`` Service."""
        return {"KUBERNETES_SERVICE_HOST": self.address, "KUBERNETES_SERVICE_PORT": str(PORT)}

    def aws_env(self) -> dict[str, str]:
        """EC2's endpoint for botocore (``AWS_ENDPOINT_URL_EC2``, its service-specific endpoint
        variable) with this server's CA, and stand-in credentials (on EKS the pod's identity)."""
        return {
            "AWS_ENDPOINT_URL_EC2": f"https://{self.address}:{PORT}",
            "AWS_CA_BUNDLE": f"{SERVICE_ACCOUNT_DIR}/ca.crt",
            "AWS_ACCESS_KEY_ID": "rehearsal",
            "AWS_SECRET_ACCESS_KEY": "rehearsal",
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def nodes(self) -> dict[str, dict[str, Any]]:
        return json.loads((self.folder / NODES).read_text())

    def volcano_jobs(self) -> dict[str, dict[str, Any]]:
        """Name -> the Volcano Jobs created so far."""
        path = self.folder / VOLCANO_JOBS
        return json.loads(path.read_text()) if path.exists() else {}

    def requests(self) -> list[dict[str, Any]]:
        path = self.folder / REQUESTS
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def close(self) -> None:
        bridge_server.stop(self.proc)


# --- the scheduler's matching ---------------------------------------------------------------------


def tolerates(tolerations: Sequence[Mapping[str, str]], taint: Mapping[str, str]) -> bool:
    """Whether a toleration matches ``taint``: same effect (or none given), same key (or an empty
    key with ``Exists``), and ``Exists`` or an equal value (kubernetes/api core/v1/toleration.go,
    ``Toleration.ToleratesTaint``)."""
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint["effect"]:
            continue
        if t.get("key") and t["key"] != taint["key"]:
            continue
        if not t.get("key") and t.get("operator") != "Exists":
            continue
        if t.get("operator") == "Exists" or t.get("value", "") == taint.get("value", ""):
            return True
    return False


def _matches(expression: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, op, values = expression["key"], expression["operator"], expression.get("values", [])
    if op == "In":
        return labels.get(key) in values
    if op == "NotIn":
        return labels.get(key) not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    raise ValueError(f"node selector operator {op!r} not matched by the rehearsal")


def selects(
    node: Mapping[str, Any],
    node_selector: Mapping[str, str],
    affinity_terms: Sequence[Mapping[str, Any]] = (),
) -> bool:
    """Whether ``node``'s labels have every ``nodeSelector`` label and meet one of the required node
    affinity terms (all its expressions): also what the DaemonSet controller keeps a pod on a node
    for (a node that no longer matches loses its daemon pod)."""
    labels = node["metadata"].get("labels", {})
    if any(labels.get(k) != v for k, v in node_selector.items()):
        return False
    return not affinity_terms or any(
        all(_matches(e, labels) for e in term.get("matchExpressions", [])) for term in affinity_terms
    )


def schedulable(
    node: Mapping[str, Any],
    node_selector: Mapping[str, str],
    tolerations: Sequence[Mapping[str, str]],
    affinity_terms: Sequence[Mapping[str, Any]] = (),
) -> bool:
    """Whether the scheduler may place a pod on ``node``: :func:`selects` it, and every NoSchedule
    and NoExecute taint tolerated (the TaintToleration plugin ignores PreferNoSchedule)."""
    if not selects(node, node_selector, affinity_terms):
        return False
    hard = [t for t in node["spec"].get("taints") or [] if t["effect"] in ("NoSchedule", "NoExecute")]
    return all(tolerates(tolerations, t) for t in hard)


def gang_placement(
    nodes: Sequence[Mapping[str, Any]],
    replicas: int,
    node_selector: Mapping[str, str],
    tolerations: Sequence[Mapping[str, str]],
) -> list[str] | None:
    """Node names for the gang's ``replicas`` pods, one per node (each pod requests all of its
    node's Neuron devices), or None when fewer nodes fit: Volcano's gang scheduling then places
    none of them (minAvailable is the whole gang) and the job waits."""
    fit = [n["metadata"]["name"] for n in nodes if schedulable(n, node_selector, tolerations)]
    return sorted(fit)[:replicas] if len(fit) >= replicas else None


if __name__ == "__main__":
    serve(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]))
    os._exit(0)
