"""Small in-process stacks and checkers for the training tests."""

from __future__ import annotations

import json
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks

from trainium_eks.jobs.training_job import BertPretrainingJob
from trainium_eks.versions import KUBERNETES_RELEASES
from trainium_job.instances import instance_facts
from trainium_job.spec import SPEC_FIELDS, BertJobSpec

#: Required fields of batch.volcano.sh/v1alpha1 Job, from Volcano's CRD
#: (volcano-sh/volcano installer/helm/chart/volcano/crd/bases/batch.volcano.sh_jobs.yaml:
#: spec.tasks[].template is the pod template; policies[].action/event are enums).
VOLCANO_JOB_REQUIRED = {"spec": ("tasks",)}
VOLCANO_ACTIONS = {
    "AbortJob",
    "RestartJob",
    "RestartTask",
    "RestartPod",
    "TerminateJob",
    "CompleteJob",
    "SyncJob",
    "EnqueueJob",
    "ResumeJob",
}
VOLCANO_EVENTS = {
    "*",
    "PodPending",
    "PodRunning",
    "PodFailed",
    "PodEvicted",
    "Unknown",
    "TaskCompleted",
    "OutOfSync",
    "CommandIssued",
    "JobUpdated",
    "TaskFailed",
}


def bare_cluster(account: str | None = None) -> eks.Cluster:
    """A bare Kubernetes 1.36 cluster with its kubectl provider, in a stack of its own (in us-west-2,
    of ``account`` when given)."""
    app = cdk.App()
    stack = cdk.Stack(app, "T", env=cdk.Environment(account=account, region="us-west-2"))
    release = KUBERNETES_RELEASES["1.36"]
    return eks.Cluster(
        stack,
        "C",
        version=release.eks_version,
        default_capacity=0,
        default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
        kubectl_provider_options=eks.KubectlProviderOptions(kubectl_layer=release.kubectl_layer(stack, "L")),
    )


def job_stack(**overrides: Any) -> BertPretrainingJob:
    """A job on a bare cluster: ``overrides`` are construct props or job-spec fields."""
    cluster = bare_cluster()
    spec_fields = {k: overrides.pop(k) for k in list(overrides) if k in SPEC_FIELDS}
    props: dict[str, Any] = dict(
        cluster=cluster,
        facts=instance_facts("trn1.32xlarge"),
        nodes=2,
        max_nodes=2,
        image="123456789012.dkr.ecr.us-west-2.amazonaws.com/trn/training:training-abc",
        namespace="training",
        claim_name="fsx-claim",
    )
    props.update(overrides)
    if spec_fields:
        props["spec"] = BertJobSpec(**spec_fields)
    return BertPretrainingJob(cdk.Stack.of(cluster), "Job", **props)


def baseline_violations(pod_spec: dict[str, Any]) -> list[str]:
    """The Pod Security Standards "baseline" rules this workload could break, plus limits set.

    (kubernetes.io/docs/concepts/security/pod-security-standards: host namespaces, privileged,
    capabilities beyond the default set, hostPath volumes, host ports, /proc mount, sysctls.)
    """
    problems = []
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod_spec.get(key):
            problems.append(key)
    for volume in pod_spec.get("volumes", []):
        if "hostPath" in volume:
            problems.append(f"hostPath volume {volume['name']}")
    allowed_caps = {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
    if pod_spec.get("securityContext", {}).get("sysctls"):
        problems.append("sysctls")
    for c in pod_spec.get("initContainers", []) + pod_spec["containers"]:
        sc = c.get("securityContext", {})
        if sc.get("privileged"):
            problems.append(f"{c['name']}: privileged")
        extra = set(sc.get("capabilities", {}).get("add", [])) - allowed_caps
        if extra:
            problems.append(f"{c['name']}: capabilities {sorted(extra)}")
        if sc.get("procMount", "Default") != "Default":
            problems.append(f"{c['name']}: procMount")
        if any(p.get("hostPort") for p in c.get("ports", [])):
            problems.append(f"{c['name']}: hostPort")
        limits = c.get("resources", {}).get("limits", {})
        if "cpu" not in limits or "memory" not in limits:
            problems.append(f"{c['name']}: no cpu/memory limits")
    return problems


def manifests_of(template: dict[str, Any]) -> list[dict[str, Any]]:
    from tests.support import k8s_manifests

    return [obj for _, obj in k8s_manifests(template)]


def submitted_jobs(template: dict[str, Any]) -> list[dict[str, Any]]:
    from tests.support import submitted_jobs as jobs

    return jobs(template)


def dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True)
