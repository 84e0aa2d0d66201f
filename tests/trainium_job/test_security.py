"""The one security module: Pod Security Admission labels, the Namespace, pod and container contexts."""

from __future__ import annotations

import json

from trainium_job.security import (
    container_security_context,
    namespace_manifest,
    pod_security_context,
    pod_security_labels,
    service_security_context,
    training_security_context,
)


def test_given_levels_then_psa_labels_are_the_kubernetes_ones_in_mode_order():
    # Kubernetes "Pod Security Admission": pod-security.kubernetes.io/<MODE>: <LEVEL>.
    assert list(pod_security_labels("baseline", warn="restricted", audit="restricted").items()) == [
        ("pod-security.kubernetes.io/enforce", "baseline"),
        ("pod-security.kubernetes.io/warn", "restricted"),
        ("pod-security.kubernetes.io/audit", "restricted"),
    ]
    assert pod_security_labels("restricted") == {"pod-security.kubernetes.io/enforce": "restricted"}


def test_given_a_namespace_then_its_manifest_carries_the_labels():
    manifest = namespace_manifest("ml", {"team": "a", **pod_security_labels("privileged")})
    assert manifest == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": "ml",
            "labels": {"team": "a", "pod-security.kubernetes.io/enforce": "privileged"},
        },
    }


def test_given_a_user_then_the_pod_runs_as_it_with_the_default_seccomp_profile():
    assert json.dumps(pod_security_context(run_as=7, fs_group=True)) == json.dumps(
        {
            "runAsNonRoot": True,
            "runAsUser": 7,
            "runAsGroup": 7,
            "fsGroup": 7,
            "seccompProfile": {"type": "RuntimeDefault"},
        }
    )
    assert pod_security_context() == {"seccompProfile": {"type": "RuntimeDefault"}}


def test_given_the_profiles_then_every_container_drops_all_capabilities_and_cannot_escalate():
    for context in (
        container_security_context(read_only_root=True),
        training_security_context(),
        service_security_context(),
        service_security_context(run_as_non_root=True),
    ):
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"]["drop"] == ["ALL"]
    assert training_security_context()["capabilities"]["add"] == ["IPC_LOCK"]
    assert service_security_context(run_as_non_root=True)["runAsNonRoot"] is True
    assert service_security_context()["readOnlyRootFilesystem"] is True
