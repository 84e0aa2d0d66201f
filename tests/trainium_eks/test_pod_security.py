"""Pod Security Admission labels on the namespaces the platform creates, and hardened pods."""

from __future__ import annotations

from tests.support import k8s_manifests, resources, submitted_jobs, synth_app, synth_platform
from tests.trainium_eks.jobs.training_support import baseline_violations

LEVELS = ("privileged", "baseline", "restricted")


def _manifests() -> list[dict]:
    """The Kubernetes objects both stacks of the default app apply, and the Volcano Jobs their
    submitters create (the admission controller sees those as it sees the others)."""
    templates = synth_app().values()
    return [
        *(obj for template in templates for _, obj in k8s_manifests(template)),
        *(job for template in templates for job in submitted_jobs(template)),
    ]


def _objects(kind: str) -> list[dict]:
    return [obj for obj in _manifests() if obj["kind"] == kind]


def _pod_specs() -> dict[str, list[dict]]:
    """namespace -> pod specs of the Jobs, Volcano Jobs and Deployments applied in it."""
    specs: dict[str, list[dict]] = {}
    for obj in _manifests():
        if obj["kind"] == "Job" and obj["apiVersion"].startswith("batch.volcano.sh"):
            templates = [t["template"] for t in obj["spec"]["tasks"]]
        elif obj["kind"] in ("Job", "Deployment", "StatefulSet"):
            templates = [obj["spec"]["template"]]
        else:
            continue
        specs.setdefault(obj["metadata"]["namespace"], []).extend(t["spec"] for t in templates)
    return specs


def test_given_default_platform_then_every_namespace_it_creates_enforces_a_pod_security_level():
    namespaces = _objects("Namespace")
    assert {ns["metadata"]["name"] for ns in namespaces} >= {"training", "etcd", "volcano-system"}
    for ns in namespaces:
        labels = ns["metadata"].get("labels", {})
        assert labels.get("pod-security.kubernetes.io/enforce") in LEVELS, ns["metadata"]["name"]


def test_given_training_namespace_then_privileged_only_because_of_ipc_lock_and_warned_at_baseline():
    (training,) = [ns for ns in _objects("Namespace") if ns["metadata"]["name"] == "training"]
    labels = training["metadata"]["labels"]
    assert (
        labels["pod-security.kubernetes.io/warn"] == labels["pod-security.kubernetes.io/audit"] == "baseline"
    )
    problems = sorted({p for spec in _pod_specs()["training"] for p in baseline_violations(spec)})
    # The one reason the namespace cannot enforce baseline.
    assert problems == ["trainer: capabilities ['IPC_LOCK']"]


def test_given_staging_job_then_no_capabilities_read_only_root_and_runtime_default_seccomp():
    jobs = [
        o
        for o in _objects("Job")
        if o["apiVersion"] == "batch/v1"
        and o["metadata"]["labels"]["app.kubernetes.io/name"] == "dataset-staging"
    ]
    assert len(jobs) == 2  # phase 1's shards and phase 2's
    for job in jobs:
        spec = job["spec"]["template"]["spec"]
        (container,) = spec["containers"]
        sc = container["securityContext"]
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert "tar -x --no-same-owner" in container["command"][-1]
        assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]


def test_given_volcano_then_its_namespace_is_ours_enforces_baseline_and_the_chart_installs_into_it():
    (ns,) = [n for n in _objects("Namespace") if n["metadata"]["name"] == "volcano-system"]
    labels = ns["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "baseline"
    assert (
        labels["pod-security.kubernetes.io/warn"]
        == labels["pod-security.kubernetes.io/audit"]
        == "restricted"
    )
    (chart,) = [
        r
        for r in resources(synth_platform(), "Custom::AWSCDK-EKS-HelmChart").values()
        if r["Properties"]["Release"] == "volcano"
    ]
    assert chart["Properties"]["Namespace"] == "volcano-system"
    assert chart["Properties"].get("CreateNamespace") in (None, False)
    assert any("Namespace" in dep for dep in chart.get("DependsOn", []))
