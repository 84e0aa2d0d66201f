"""The training container under containerd's default seccomp profile: no library it loads needs a
call the profile gates behind a capability the container lacks, and it adds exactly the
capabilities those libraries need (IPC_LOCK), not SYS_NICE."""

from __future__ import annotations

from tests.contracts.emitted import manifests
from tests.contracts.seccomp import CONSUMERS, GATED, NEVER_ALLOWED


def _training_containers():
    for m in manifests():
        body = m.body
        if body.get("apiVersion", "").startswith("batch.volcano.sh"):
            for task in body["spec"]["tasks"]:
                pod = task["template"]["spec"]
                for container in pod["containers"]:
                    yield m.where, pod, container


def test_given_the_consumers_then_none_makes_a_gated_or_refused_call():
    gated = {call for calls, _ in GATED.values() for call in calls} | set(NEVER_ALLOWED)
    assert {name: set(c["calls"]) & gated for name, c in CONSUMERS.items() if set(c["calls"]) & gated} == {}
    assert all(len(str(c["source"])) > 40 for c in CONSUMERS.values())


def test_given_every_training_container_then_runtime_default_with_just_the_capabilities_consumers_need():
    needed = {cap.removeprefix("CAP_") for c in CONSUMERS.values() for cap in c["needs"]}  # type: ignore[union-attr]
    seen = 0
    for where, pod, container in _training_containers():
        seen += 1
        context = container["securityContext"]
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, where
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}, where
        assert context["capabilities"]["drop"] == ["ALL"], where
        added = set(context["capabilities"].get("add", []))
        assert added == needed, where
        assert not added & {cap.removeprefix("CAP_") for cap in GATED}, where
    assert seen >= 3


def test_given_sys_nice_then_the_profile_would_allow_the_numa_calls_the_consumers_do_not_make():
    calls, source = GATED["CAP_SYS_NICE"]
    assert {"mbind", "set_mempolicy"} <= set(calls) and "seccomp_default.go" in source
    assert "move_pages" in NEVER_ALLOWED  # refused even with SYS_NICE: adding it would not help there
