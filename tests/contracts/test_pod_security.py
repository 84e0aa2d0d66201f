"""Every namespace the stacks create carries Pod Security Admission labels PSA reads."""

from __future__ import annotations

from tests.contracts.check import check_psa_labels
from tests.contracts.emitted import manifests


def test_given_every_namespace_then_its_pod_security_labels_are_read_by_admission():
    namespaces = [m for m in manifests() if m.body["kind"] == "Namespace"]
    assert len(namespaces) >= 12
    assert [
        f"{n.where}: {p}" for n in namespaces for p in check_psa_labels(n.body["metadata"].get("labels", {}))
    ] == []


def test_given_a_wrong_label_or_level_then_the_check_fails():
    assert check_psa_labels({"pod-security.kubernetes.io/enforce": "strict"}) == [
        "label pod-security.kubernetes.io/enforce='strict': levels are privileged, baseline, restricted"
    ]
    assert check_psa_labels({"pod-security.kubernetes.io/enforcing": "baseline"})[0].startswith(
        "label pod-security.kubernetes.io/enforcing: Pod Security Admission reads no such label"
    )
