"""The rehearsal's no-verdict scene: the node-health-check DaemonSet's pod on two fresh nodes whose
check never gives a verdict, with the verdict's bound shortened to seconds. On one the check hangs
(``neuron-ls`` never answers); on the other its process is killed at every start while it runs a
check (an OOM kill, a crash) and the container restarted, as the kubelet restarts a DaemonSet's
container. Both must end as a failed node does: labelled, tainted, Evented, replaced.

The expected labels, taints and Event reasons are docs/healing.md's, written out here, not read
from the code under test."""

from __future__ import annotations

from typing import Any

import pytest

from tests.rehearsal.scenario import NO_VERDICT_DEADLINE_S, SILENT_FAULTS, Observations
from tests.support import validate_k8s
from trainium_eks.versions import DEFAULT_KUBERNETES_VERSION

pytestmark = pytest.mark.after("no_verdict")

LABEL = "trainium-eks/node-health"
PENDING = {"key": "trainium-eks/node-health", "value": "pending", "effect": "NoSchedule"}
FAILED = {"key": "trainium-eks/node-health-failed", "value": "no-verdict", "effect": "NoSchedule"}
KINDS = sorted(SILENT_FAULTS.values())


def node_of(rehearsal: Observations, kind: str) -> str:
    [name] = [n for n, k in rehearsal.no_verdict.faults.items() if k == kind]
    return name


def requests_about(rehearsal: Observations, method: str, node: str) -> list[dict[str, Any]]:
    return [
        r
        for r in rehearsal.no_verdict.requests
        if r["method"] == method
        and (
            r["path"].endswith(f"/nodes/{node}")
            or (r["body"] or {}).get("involvedObject", {}).get("name") == node
        )
    ]


@pytest.mark.parametrize("kind", KINDS)
def test_given_a_check_without_a_verdict_then_its_node_is_labelled_failed_and_tainted_no_verdict(
    rehearsal, kind
):
    seen = rehearsal.no_verdict
    name = node_of(rehearsal, kind)
    node = seen.nodes[name]
    validate_k8s(node, DEFAULT_KUBERNETES_VERSION)
    assert node["metadata"]["labels"][LABEL] == "failed", seen.logs[name]
    assert FAILED in node["spec"]["taints"] and PENDING not in node["spec"]["taints"]
    before = seen.registered[name]["spec"]["taints"]
    assert [t for t in node["spec"]["taints"] if t != FAILED] == [t for t in before if t != PENDING]


@pytest.mark.parametrize("kind", KINDS)
def test_given_no_verdict_then_the_bound_is_kept_neither_early_nor_much_late(rehearsal, kind):
    seen = rehearsal.no_verdict
    name = node_of(rehearsal, kind)
    # Not before the bound (a slow healthy node keeps its chance); after it, within the time to
    # notice, act and restart once more on 2 busy cores.
    assert NO_VERDICT_DEADLINE_S <= seen.seconds[name] <= NO_VERDICT_DEADLINE_S + 30, seen.logs[name]


@pytest.mark.parametrize("kind", KINDS)
def test_given_replacement_then_the_failed_event_names_no_verdict_and_the_instance_is_terminated_after(
    rehearsal, kind
):
    seen = rehearsal.no_verdict
    name = node_of(rehearsal, kind)
    posts = requests_about(rehearsal, "POST", name)
    for post in posts:
        validate_k8s(post["body"], DEFAULT_KUBERNETES_VERSION)
    assert [p["body"]["reason"] for p in posts] == ["TrainiumNodeHealthCheckFailed", "TrainiumNodeReplaced"]
    assert posts[0]["body"]["message"].startswith("no-verdict: expected a verdict within")
    instance = seen.registered[name]["spec"]["providerID"].rsplit("/", 1)[1]
    [call] = [r for r in seen.requests if r["path"] == "/" and r["body"]["InstanceId.1"] == instance]
    assert call["body"]["Action"] == "TerminateInstances"
    assert seen.requests.index(call) > max(seen.requests.index(p) for p in posts)
    # One verdict: one patch of the Node, one failed Event, one termination.
    assert len(requests_about(rehearsal, "PATCH", name)) == 1


def test_given_a_hung_check_then_its_one_container_gives_the_verdict_while_the_check_still_waits(rehearsal):
    seen = rehearsal.no_verdict
    name = node_of(rehearsal, "hang")
    assert seen.starts[name] == 1 and seen.codes[name] == 0, seen.logs[name]
    lines = seen.logs[name].splitlines()
    assert "(the devices check had not ended)" in next(x for x in lines if x.startswith("no-verdict: FAILED"))
    assert not any(x.startswith("devices:") for x in lines)  # neuron-ls never answered


def test_given_a_crash_looping_check_then_a_start_past_the_bound_gives_the_verdict_without_checking(
    rehearsal,
):
    seen = rehearsal.no_verdict
    name = node_of(rehearsal, "crash")
    starts = seen.starts[name]
    assert starts >= 3, seen.logs[name]  # killed at least twice before the bound
    assert seen.codes[name] == 0, seen.logs[name]
    [line] = [x for x in seen.logs[name].splitlines() if x.startswith("no-verdict: FAILED")]
    # The emptyDir kept every earlier start: the clock ran from the first one.
    assert f"{starts} starts of the check (no check run at this start)" in line
