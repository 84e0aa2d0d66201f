"""The rehearsal's deep-check scene: the node-health-check DaemonSet's pod on six fresh nodes, four
with a fault (one for each check: a Neuron device missing, a NeuronCore computing wrong, a failed
all-reduce, an EFA device missing); what it sent the (stand-in) Kubernetes API and EC2, checked
with the Kubernetes schemas and botocore's model of EC2; then where the scheduler may put the gang.

The expected labels, taints and Event words are the issue's (docs/healing.md), written out here,
not read from the code under test."""

from __future__ import annotations

from typing import Any

import botocore.session
import pytest

from tests.rehearsal.scenario import (
    DEVICES_MISSING,
    EFA_MISSING,
    FAULTS,
    FAULTY_CORE,
    HEALTH_NODES,
    Observations,
)
from tests.support import validate_k8s
from trainium_eks.versions import DEFAULT_KUBERNETES_VERSION

pytestmark = pytest.mark.after("deep_check")

LABEL = "trainium-eks/node-health"
PENDING = {"key": "trainium-eks/node-health", "value": "pending", "effect": "NoSchedule"}
#: The checks in the order the program runs them (docs/healing.md), each failing node's last.
CHECKS = ("devices", "efa", "compute", "collective")
#: What each fault's node shows in its check's line: a trn1.32xlarge has 16 Neuron devices, 32
#: NeuronCores and 8 EFA devices (trainium_job/instances.py cites the AWS pages); the 8x8
#: product has 64 elements; the failed all-reduce prints the Neuron docs' failure line.
EVIDENCE = {
    "devices": f"found {16 - DEVICES_MISSING} Neuron devices",
    "compute": f"core {FAULTY_CORE}: wrong product (1 of 64 elements differ)",
    "collective": "1 errors found - test failed",
    "efa": f"found {8 - EFA_MISSING} EFA devices",
}


def failed_taint(check: str) -> dict[str, str]:
    return {"key": "trainium-eks/node-health-failed", "value": check, "effect": "NoSchedule"}


def good_nodes(rehearsal: Observations) -> list[str]:
    return sorted(n for n in rehearsal.deep_check.registered if n not in rehearsal.deep_check.faults)


def node_failing(rehearsal: Observations, check: str) -> str:
    [node] = [n for n, kind in rehearsal.deep_check.faults.items() if kind == check]
    return node


def kube_requests(rehearsal: Observations, method: str, node: str | None = None) -> list[dict[str, Any]]:
    found = [r for r in rehearsal.deep_check.requests if r["method"] == method and r["path"] != "/"]
    if node is None:
        return found
    return [
        r
        for r in found
        if r["path"].endswith(f"/nodes/{node}")
        or (r["body"] or {}).get("involvedObject", {}).get("name") == node
    ]


def test_given_fresh_trainium_nodes_then_they_are_valid_nodes_with_the_pending_taint_and_the_check_fits_each(
    rehearsal,
):
    seen = rehearsal.deep_check
    assert len(seen.registered) == HEALTH_NODES
    assert sorted(seen.faults.values()) == sorted(CHECKS) == sorted(FAULTS.values())
    for name, node in seen.registered.items():
        validate_k8s(node, DEFAULT_KUBERNETES_VERSION)
        assert PENDING in node["spec"]["taints"] and LABEL not in node["metadata"]["labels"]
        assert seen.daemon_fits[name], f"the DaemonSet's pod does not fit {name}: {node}"


def test_given_healthy_nodes_then_they_are_labelled_passed_and_lose_only_the_pending_taint(rehearsal):
    seen = rehearsal.deep_check
    for name in good_nodes(rehearsal):
        node = seen.nodes[name]
        validate_k8s(node, DEFAULT_KUBERNETES_VERSION)
        assert node["metadata"]["labels"][LABEL] == "passed", seen.logs[name]
        before = seen.registered[name]["spec"]["taints"]
        assert node["spec"]["taints"] == [t for t in before if t != PENDING]
        assert kube_requests(rehearsal, "POST", name) == []  # no Event for a node that passed


@pytest.mark.parametrize("check", CHECKS)
def test_given_a_node_with_a_fault_then_it_is_labelled_failed_and_tainted_naming_the_check_it_fails(
    rehearsal, check
):
    seen = rehearsal.deep_check
    name = node_failing(rehearsal, check)
    node = seen.nodes[name]
    validate_k8s(node, DEFAULT_KUBERNETES_VERSION)
    assert node["metadata"]["labels"][LABEL] == "failed", seen.logs[name]
    assert failed_taint(check) in node["spec"]["taints"] and PENDING not in node["spec"]["taints"]
    lines = seen.logs[name].splitlines()
    assert [line.split(":")[0] for line in lines][: CHECKS.index(check) + 2] == [
        *CHECKS[: CHECKS.index(check) + 1],
        "verdict",
    ], seen.logs[name]  # the checks before its own passed; none after it ran
    [line] = [line for line in lines if line.startswith(f"{check}:")]
    assert EVIDENCE[check] in line, line


@pytest.mark.parametrize("check", CHECKS)
def test_given_a_failed_node_then_a_valid_warning_event_on_it_names_the_check(rehearsal, check):
    seen = rehearsal.deep_check
    name = node_failing(rehearsal, check)
    posts = kube_requests(rehearsal, "POST", name)
    assert posts, seen.logs[name]
    for post in posts:
        event = post["body"]
        validate_k8s(event, DEFAULT_KUBERNETES_VERSION)
        assert post["path"] == f"/api/v1/namespaces/{event['metadata']['namespace']}/events"
        assert event["type"] == "Warning"
        assert event["involvedObject"] == {
            "apiVersion": "v1",
            "kind": "Node",
            "name": name,
            "uid": seen.registered[name]["metadata"]["uid"],
        }
    first = posts[0]["body"]
    assert first["reason"] == "TrainiumNodeHealthCheckFailed" and first["message"].startswith(f"{check}:")


def test_given_replacement_then_each_failed_nodes_instance_alone_is_terminated_after_its_events(rehearsal):
    seen = rehearsal.deep_check
    calls = [r for r in seen.requests if r["path"] == "/"]
    instance = {name: node["spec"]["providerID"].rsplit("/", 1)[1] for name, node in seen.registered.items()}
    assert sorted(c["body"]["InstanceId.1"] for c in calls) == sorted(instance[n] for n in seen.faults)
    model = botocore.session.get_session().get_service_model("ec2")
    for name in seen.faults:
        [call] = [c for c in calls if c["body"]["InstanceId.1"] == instance[name]]
        assert call["body"]["Action"] == "TerminateInstances" in model.operation_names
        assert call["body"]["Version"] == model.api_version
        assert "AWS4-HMAC-SHA256" in call["headers"]["authorization"]  # signed, as EC2 requires
        assert "us-west-2/ec2/aws4_request" in call["headers"]["authorization"]
        posts = kube_requests(rehearsal, "POST", name)
        assert [r["body"]["reason"] for r in posts] == [
            "TrainiumNodeHealthCheckFailed",
            "TrainiumNodeReplaced",
        ]
        assert seen.requests.index(call) > max(seen.requests.index(r) for r in posts)


def test_given_every_node_change_then_it_is_a_valid_strategic_merge_patch_on_the_version_read(rehearsal):
    seen = rehearsal.deep_check
    for name in seen.registered:
        gets, patches = kube_requests(rehearsal, "GET", name), kube_requests(rehearsal, "PATCH", name)
        assert len(gets) == len(patches) == 1, (gets, patches)
        [patch] = patches
        assert patch["headers"]["content-type"] == "application/strategic-merge-patch+json"
        assert patch["headers"]["authorization"].lower().startswith("bearer ")
        # The patch is a partial Node: its fields must be the Node schema's.
        validate_k8s({"apiVersion": "v1", "kind": "Node", **patch["body"]}, DEFAULT_KUBERNETES_VERSION)
        assert (
            patch["body"]["metadata"]["resourceVersion"]
            == seen.registered[name]["metadata"]["resourceVersion"]
        )


def test_given_healthy_nodes_labelled_then_their_check_pods_end_0_on_their_deletion(rehearsal):
    seen = rehearsal.deep_check
    for name in good_nodes(rehearsal):
        assert seen.codes[name] == 0, seen.logs[name]
        checks = [line.split(":")[0] for line in seen.logs[name].splitlines()][:5]
        assert checks == ["devices", "efa", "compute", "collective", "verdict"], seen.logs[name]


def test_given_the_failed_nodes_labelled_then_their_check_pods_end_0_on_their_deletion(rehearsal):
    seen = rehearsal.deep_check
    for name in seen.faults:
        assert seen.codes[name] == 0, seen.logs[name]


def test_given_the_deep_check_then_it_called_the_stand_in_neuron_tools_as_the_image_has_them(rehearsal):
    hosts = {f"node-health-check-{n}" for n in rehearsal.deep_check.registered}
    listed = [c for c in rehearsal.calls if c["tool"] == "neuron-ls" and c["host"] in hosts]
    assert sorted(c["host"] for c in listed) == sorted(hosts)
    assert all(c["argv"] == ["--json-output"] for c in listed)
    reduced = [c for c in rehearsal.calls if c["tool"] == "nccom-test"]
    past_compute = [*good_nodes(rehearsal), node_failing(rehearsal, "collective")]
    # A node stops at its first failed check: the other faults' nodes never all-reduce.
    assert sorted(c["host"] for c in reduced) == sorted(f"node-health-check-{n}" for n in past_compute)


def test_given_the_checked_nodes_then_the_gang_is_placed_on_the_two_good_ones_and_runs_there(rehearsal):
    seen = rehearsal.deep_check
    assert seen.placement == good_nodes(rehearsal)
    assert sorted(seen.gang_nodes.values()) == good_nodes(rehearsal)
    for host, log in seen.gang_logs.items():
        assert "Neuron driver" in log and "a supported pair" in log, (host, log)


def test_given_only_one_good_node_then_the_gang_has_no_placement_and_waits(rehearsal):
    assert rehearsal.deep_check.placement_one_good is None


def test_given_the_scene_then_its_time_is_recorded(rehearsal, record_property):
    """The compute check's process per NeuronCore (32 on a trn1.32xlarge, each loading torch, on
    the four nodes that pass their devices and EFA checks) is most of the scene's time."""
    seen = rehearsal.deep_check
    record_property("deep_check_seconds", round(seen.seconds, 1))
    record_property("deep_check_phase_seconds", round(seen.phase_seconds, 1))
    assert 0 < seen.seconds <= seen.phase_seconds
