"""Readers of what the synthesized stacks put on a Trainium node: DaemonSets and workload pods."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tests.support import helm_charts, k8s_manifests, resources, submitted_jobs
from trainium_eks.addons.node_daemons import (
    ADDON_DAEMONS,
    KUBE_PROXY,
    NodeDaemon,
    chart_daemons,
    manifest_daemons,
)
from trainium_job.allocatable import Resources


def template_daemons(templates: Iterable[Mapping[str, Any]], instance_type: str) -> list[NodeDaemon]:
    """Every DaemonSet the templates deploy onto a Trainium node of ``instance_type``: from each
    Helm release (chart, version and the values in the template), each managed add-on, each
    DaemonSet manifest, and the kube-proxy EKS installs itself. An unknown chart version or
    add-on raises KeyError."""
    found = [KUBE_PROXY]
    for template in templates:
        for props in helm_charts(template).values():
            found += chart_daemons(props["Chart"], props["Version"], props.get("Values", {}), instance_type)
        for addon in resources(template, "AWS::EKS::Addon").values():
            found += ADDON_DAEMONS[addon["Properties"]["AddonName"]]
        found += manifest_daemons((obj for _, obj in k8s_manifests(template)), instance_type)
    return found


def pod_spec_requests(pod_spec: Mapping[str, Any]) -> Resources:
    """The CPU and memory the containers of a pod spec request (one pod)."""
    out = Resources(pods=1)
    for container in pod_spec["containers"]:
        out = out + Resources.of_requests(container["resources"]["requests"])
    return out


def workload_pods(templates: Iterable[Mapping[str, Any]]) -> dict[str, tuple[Mapping[str, Any], int]]:
    """Kind of pod -> (its pod spec, how many run at once) for every workload object that may run on
    the Trainium nodes: the Volcano job's pods (which its submitter creates), the staging Job's and
    the preparation Job's (not the submitter's, on the system nodes)."""
    pods: dict[str, tuple[Mapping[str, Any], int]] = {}
    for template in templates:
        for job in submitted_jobs(template):
            (task,) = job["spec"]["tasks"]
            pods["training"] = (task["template"]["spec"], task["replicas"])
        for _, obj in k8s_manifests(template):
            if obj["kind"] != "Job" or obj["metadata"]["name"].startswith("submit-"):
                continue
            if obj["apiVersion"].startswith("batch.volcano.sh/"):
                (task,) = obj["spec"]["tasks"]
                pods["training"] = (task["template"]["spec"], task["replicas"])
            else:
                name = obj["metadata"]["labels"]["app.kubernetes.io/name"]
                pods[name] = (obj["spec"]["template"]["spec"], obj["spec"].get("parallelism", 1))
    return pods
