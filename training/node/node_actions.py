"""What the node health checks do to a Node once they have a verdict: label it, swap its health
taint, record Events, and on request terminate its EC2 instance so the nodegroup or Karpenter
brings a fresh one.

    mark_passed(node_name)
    mark_failed(node_name, check, message, replace=True)

The deep check (``training.node.health_check``) and the pre-training fabric check call these. The
pod's ServiceAccount needs ``get`` and ``patch`` on ``nodes`` and ``create`` on ``events`` (core
group); with replacement, the node's IAM identity the pod uses needs ``ec2:TerminateInstances``.

Through the official ``kubernetes`` client with the in-cluster configuration. The Node is changed
by one strategic-merge patch carrying the ``resourceVersion`` read: the API server refuses it with
409 Conflict when the Node changed in between (another controller added a taint), and the change is
then recomputed from a fresh read, so no concurrent change is overwritten.
"""

from __future__ import annotations

import re
import sys
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

# The kubernetes client ships no type information (no py.typed, no stubs package).
from kubernetes import client, config  # type: ignore[import-untyped]
from kubernetes.client.exceptions import ApiException  # type: ignore[import-untyped]

from trainium_job.node_health import (
    EVENT_COMPONENT,
    FAILED,
    FAILED_REASON,
    HEALTH_LABEL,
    HEALTH_TAINT_KEYS,
    PASSED,
    PENDING_TAINT,
    RECHECK_REASON,
    REPLACED_REASON,
    failed_taint,
)

#: Events of a cluster-scoped object such as a Node live in ``default``, where ``kubectl describe
#: node`` and the kubelet's own node Events look (client-go tools/record/event.go, ``makeEvent``).
EVENT_NAMESPACE: Final = "default"
#: Reads and patches tried before giving up on a Node that keeps changing.
CONFLICT_ATTEMPTS: Final = 5
#: Seconds each API request may take (the client waits forever without one): a request that
#: hangs ends in an error, the check's process ends, and its restart acts again (the verdict's
#: bound, ``training.node.health_check``).
REQUEST_TIMEOUT_S: Final = 30
#: ``aws:///<availability zone>/<instance id>``: the AWS cloud provider's Node ``spec.providerID``
#: (kubernetes/cloud-provider-aws, ``pkg/providers/v1/instances.go`` ``KubernetesInstanceID``).
_PROVIDER_ID = re.compile(r"^aws:///(?P<az>[a-z0-9-]+)/(?P<instance>i-[0-9a-f]+)$")
#: The region is the zone's name less its zone letter (us-west-2a, and us-west-2-lax-1a for a
#: Local Zone whose parent is us-west-2).
_REGION = re.compile(r"^(?P<region>[a-z]{2}(?:-gov)?-[a-z]+-\d+)")


def core_api(configuration: client.Configuration | None = None) -> client.CoreV1Api:
    """A CoreV1Api for ``configuration``, or for the pod's in-cluster ServiceAccount."""
    if configuration is None:
        configuration = client.Configuration()
        config.load_incluster_config(client_configuration=configuration)
    return client.CoreV1Api(client.ApiClient(configuration))


def health_taints(
    taints: Sequence[Mapping[str, Any]], verdict_taint: Mapping[str, str] | None
) -> list[dict[str, Any]]:
    """``taints`` less every health taint (pending or an earlier failure), plus ``verdict_taint``."""
    kept = [dict(t) for t in taints if t.get("key") not in HEALTH_TAINT_KEYS]
    return kept + ([dict(verdict_taint)] if verdict_taint is not None else [])


def _patch_verdict(
    core: client.CoreV1Api, node_name: str, verdict: str | None, taint: Mapping[str, str] | None
) -> dict[str, Any]:
    """Label (``verdict`` None: unlabel) and re-taint the Node, retrying on 409 Conflict; the Node
    as last read."""
    for attempt in range(CONFLICT_ATTEMPTS):
        node = core.api_client.sanitize_for_serialization(
            core.read_node(node_name, _request_timeout=REQUEST_TIMEOUT_S)
        )
        taints = health_taints(node.get("spec", {}).get("taints") or [], taint)
        body = {
            "metadata": {
                "resourceVersion": node["metadata"]["resourceVersion"],
                "labels": {HEALTH_LABEL: verdict},
            },
            "spec": {"taints": taints},
        }
        try:
            # A dict body would be sent as a JSON patch by the client's default content type.
            core.patch_node(
                node_name,
                body,
                _content_type="application/strategic-merge-patch+json",
                _request_timeout=REQUEST_TIMEOUT_S,
            )
            return dict(node)
        except ApiException as err:
            if err.status != 409 or attempt == CONFLICT_ATTEMPTS - 1:
                raise
            print(f"node {node_name} changed while it was being labelled; reading it again", file=sys.stderr)
    raise AssertionError("unreachable")


def event_body(
    node: Mapping[str, Any], reason: str, message: str, now: datetime | None = None
) -> dict[str, Any]:
    """A core/v1 Warning Event about ``node`` (a Node as the API returns it)."""
    stamp = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    name = node["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.{uuid.uuid4().hex[:16]}", "namespace": EVENT_NAMESPACE},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": name, "uid": node["metadata"]["uid"]},
        "reason": reason,
        "message": message,
        "type": "Warning",
        "source": {"component": EVENT_COMPONENT, "host": name},
        "reportingComponent": EVENT_COMPONENT,
        "reportingInstance": name,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


def _event(core: client.CoreV1Api, body: Mapping[str, Any]) -> None:
    core.create_namespaced_event(EVENT_NAMESPACE, body, _request_timeout=REQUEST_TIMEOUT_S)


def instance_of(provider_id: str) -> tuple[str, str]:
    """(region, instance id) of an AWS Node ``spec.providerID``; ValueError for any other."""
    match = _PROVIDER_ID.match(provider_id)
    region = _REGION.match(match["az"]) if match else None
    if match is None or region is None:
        raise ValueError(f"not an AWS EC2 provider ID: {provider_id!r}")
    return region["region"], match["instance"]


def _ec2_client(region: str) -> Any:
    import boto3

    return boto3.client("ec2", region_name=region)


def mark_passed(node_name: str, *, core: client.CoreV1Api | None = None) -> None:
    """Label the Node ``passed`` and remove its health taint."""
    _patch_verdict(core or core_api(), node_name, PASSED, None)


def mark_failed(
    node_name: str,
    check: str,
    message: str,
    *,
    replace: bool,
    core: client.CoreV1Api | None = None,
    ec2_client: Callable[[str], Any] = _ec2_client,
) -> None:
    """Label the Node ``failed``, taint it with the failed ``check``, record a Warning Event with
    ``message``; with ``replace``, a second Event and then EC2 TerminateInstances of its instance.
    ``ec2_client`` makes the EC2 client for a region."""
    core = core or core_api()
    node = _patch_verdict(core, node_name, FAILED, failed_taint(check))
    _event(core, event_body(node, FAILED_REASON, f"{check}: {message}"))
    if not replace:
        return
    region, instance_id = instance_of(node.get("spec", {}).get("providerID") or "")
    _event(
        core, event_body(node, REPLACED_REASON, f"terminating {instance_id} after the {check} check failed")
    )
    ec2_client(region).terminate_instances(InstanceIds=[instance_id])


def request_recheck(node_name: str, message: str, *, core: client.CoreV1Api | None = None) -> None:
    """Send the Node back to the deep check: its health label removed (the check's DaemonSet selects
    nodes without one) and the pending taint back (nothing that trains lands on it until the check
    passes again), with a Warning Event saying why."""
    core = core or core_api()
    node = _patch_verdict(core, node_name, None, PENDING_TAINT)
    _event(core, event_body(node, RECHECK_REASON, message))
