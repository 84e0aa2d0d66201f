"""Nothing but the training gang and the node daemons can land on the Trainium pool.

Every pod the two stacks create is walked: the Kubernetes objects they apply (Deployments,
DaemonSets, StatefulSets, Jobs, Volcano Jobs, bare Pods), the Volcano Job the submitter creates
(its ConfigMap's ``job.json``), and the pods of every Helm chart and EKS managed add-on they
install (tests/contracts/chart_pods.py: read from the charts' templates and the values we pass,
not rendered). Each is matched against the Trainium nodes as the scheduler matches them
(tests/rehearsal/kube_api.py ``schedulable``: node selector, required node affinity, NoSchedule
and NoExecute taints): the node a NodePool or nodegroup makes, as it starts (startup taints and
the health check's pending taint on) and once checked (the check's label on, the pending taint
off). With Karpenter a pod that can land there can also make Karpenter launch a Trainium node for
it (it matches the NodePool's labels and tolerates its taints; startup taints do not count:
kubernetes-sigs/karpenter v1.14.1 pkg/apis/v1/nodeclaim.go L32-38).

What may land there besides DaemonSets' pods, per configuration (:data:`EXPECTED`): with
Karpenter the training gang only (staging and preparation run on CPU nodes Karpenter launches for
them); with the fixed nodegroup, which has no other nodes for them, also the staging or
preparation pods.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from tests.contracts.chart_pods import PlacedPod, addon_pods, chart_pods
from tests.contracts.emitted import pod_specs
from tests.contracts.nodes import EKS_TAINT_EFFECTS
from tests.rehearsal.kube_api import schedulable
from tests.support import (
    PLATFORM_STACK,
    helm_charts,
    k8s_manifests,
    resources,
    submitted_jobs,
    synth_app,
    variants,
)
from trainium_eks.nodes.node_pool import DATASET_POOL_NAME, NODE_POOL_NAME, PREPARATION_POOL_NAME
from trainium_job.node_health import HEALTH_LABEL, PASSED, PENDING_TAINT
from trainium_job.scheduling import INSTANCE_TYPE_LABEL, NODE_POOL_LABEL_KEY, TRAINIUM_NODE_LABEL

VARIANTS = variants("default", "preparation on", "nodegroup", "nodegroup preparation on")
#: What besides DaemonSets may land on the Trainium nodes, by configuration.
EXPECTED = {
    # Staging runs on the dataset NodePool's node, preparation on the preparation NodePool's.
    "default": {"training gang"},
    "preparation on": {"training gang"},
    # No CPU nodes to launch: phase 1's staging runs there before the gang is submitted, phase 2's
    # and the held-out sets' beside it (their share is reserved: tests/stacks/test_node_fit.py);
    # so does the preparation.
    "nodegroup": {"training gang", "dataset-staging", "heldout-staging"},
    "nodegroup preparation on": {"training gang", "dataset-preparation", "heldout-staging"},
}
#: Labels every node carries (the kubelet's own; EC2 x86_64 instances only here).
_NODE_LABELS = {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
#: The label Karpenter puts on every node of a NodePool (kubernetes-sigs/karpenter v1.14.1
#: pkg/apis/v1/labels.go L41 ``NodePoolLabelKey``).
_NODEPOOL_LABEL = "karpenter.sh/nodepool"


def _node(labels: Mapping[str, str], taints: list[dict[str, str]]) -> dict[str, Any]:
    return {"metadata": {"labels": {**_NODE_LABELS, **labels}}, "spec": {"taints": taints}}


def _states(
    labels: Mapping[str, str], taints: list[dict[str, str]], startup: list[dict[str, str]]
) -> list[dict]:
    """The node as it starts (startup taints on) and once the health check passed (its label on,
    the pending taint lifted)."""
    checked = {**labels, **({HEALTH_LABEL: PASSED} if PENDING_TAINT in startup else {})}
    return [_node(labels, [*taints, *startup]), _node(checked, taints)]


def pool_nodes(template: Mapping[str, Any], name: str) -> list[dict]:
    """A Karpenter NodePool's node: its template's labels, the one-value ``In`` requirements (which
    Karpenter writes as labels), its NodePool label; its taints and startup taints."""
    (pool,) = [
        o for _, o in k8s_manifests(template) if o["kind"] == "NodePool" and o["metadata"]["name"] == name
    ]
    spec = pool["spec"]["template"]
    labels = {
        **spec["metadata"].get("labels", {}),
        **{
            r["key"]: r["values"][0]
            for r in spec["spec"]["requirements"]
            if r["operator"] == "In" and len(r["values"]) == 1
        },
        _NODEPOOL_LABEL: name,
    }
    return _states(labels, list(spec["spec"].get("taints", [])), list(spec["spec"].get("startupTaints", [])))


def trainium_nodegroup_nodes(template: Mapping[str, Any]) -> list[dict]:
    """The Trainium managed nodegroup's node: its labels and instance type; its taints, of which
    the pending one is lifted by the health check."""
    launch_types = {
        logical_id: lt["Properties"]["LaunchTemplateData"].get("InstanceType")
        for logical_id, lt in resources(template, "AWS::EC2::LaunchTemplate").items()
    }
    (group,) = [
        g["Properties"]
        for g in resources(template, "AWS::EKS::Nodegroup").values()
        if TRAINIUM_NODE_LABEL.items() <= g["Properties"].get("Labels", {}).items()
    ]
    instance_type = (group.get("InstanceTypes") or [launch_types[group["LaunchTemplate"]["Id"]["Ref"]]])[0]
    taints = [
        {"key": t["Key"], "value": t.get("Value", ""), "effect": EKS_TAINT_EFFECTS[t["Effect"]]}
        for t in group.get("Taints", [])
    ]
    labels = {**group["Labels"], INSTANCE_TYPE_LABEL: instance_type}
    return _states(
        labels, [t for t in taints if t != PENDING_TAINT], [t for t in taints if t == PENDING_TAINT]
    )


def trainium_nodes(platform: Mapping[str, Any]) -> list[dict]:
    """The Trainium pool's node in its states: the NodePool's with Karpenter, else the nodegroup's."""
    if any(o["kind"] == "NodePool" for _, o in k8s_manifests(platform)):
        return pool_nodes(platform, NODE_POOL_NAME)
    return trainium_nodegroup_nodes(platform)


def _role(kind: str, obj: Mapping[str, Any]) -> str:
    """What a pod is for the expectation: a DaemonSet's, the training gang's, or its workload's
    ``app.kubernetes.io/name`` (else its kind and name)."""
    if kind == "DaemonSet":
        return "daemon"
    if obj.get("apiVersion", "").startswith("batch.volcano.sh/"):
        return "training gang"
    name = obj.get("metadata", {}).get("labels", {}).get("app.kubernetes.io/name")
    return name or f"{kind} {obj['metadata'].get('name')}"


def _affinity_terms(pod: Mapping[str, Any]) -> list[dict[str, Any]]:
    required = (
        pod.get("affinity", {})
        .get("nodeAffinity", {})
        .get("requiredDuringSchedulingIgnoredDuringExecution", {})
    )
    return list(required.get("nodeSelectorTerms", []))


def stack_pods(templates: Mapping[str, Mapping[str, Any]]) -> Iterator[tuple[str, PlacedPod, list[dict]]]:
    """(role, pod, required node affinity terms) of every pod the stacks create."""
    for stack, template in templates.items():
        for logical_id, obj in k8s_manifests(template):
            for spec in pod_specs(obj):
                where = f"{stack} / {logical_id} / {obj['kind']} {obj['metadata'].get('name')}"
                pod = PlacedPod(
                    where, obj["kind"], dict(spec.get("nodeSelector", {})), list(spec.get("tolerations", []))
                )
                yield _role(obj["kind"], obj), pod, _affinity_terms(spec)
        for job in submitted_jobs(template):
            for spec in pod_specs(job):
                where = f"{stack} / submitted Volcano Job {job['metadata']['name']}"
                pod = PlacedPod(
                    where, "Job", dict(spec.get("nodeSelector", {})), list(spec.get("tolerations", []))
                )
                yield _role("Job", job), pod, _affinity_terms(spec)
        for logical_id, props in helm_charts(template).items():
            for pod in chart_pods(
                f"{stack} / {logical_id}", props["Chart"], props["Version"], props.get("Values", {})
            ):
                yield ("daemon" if pod.kind == "DaemonSet" else pod.where), pod, []
        for logical_id, addon in resources(template, "AWS::EKS::Addon").items():
            for pod in addon_pods(f"{stack} / {logical_id}", addon["Properties"]["AddonName"]):
                yield ("daemon" if pod.kind == "DaemonSet" else pod.where), pod, []


def lands(pod: PlacedPod, terms: list[dict], nodes: list[dict]) -> bool:
    """Whether the scheduler may place ``pod`` on one of ``nodes``."""
    return any(schedulable(node, pod.node_selector, pod.tolerations, terms) for node in nodes)


def _walk(variant: str) -> tuple[dict[str, dict[str, Any]], list[tuple[str, PlacedPod, list[dict]]]]:
    templates = synth_app(**VARIANTS[variant])
    return templates, list(stack_pods(templates))


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_given_every_pod_of_the_stacks_then_only_the_gang_and_daemons_can_land_on_the_trainium_pool(variant):
    # Given every pod both stacks create, and the Trainium pool's node
    templates, pods = _walk(variant)
    nodes = trainium_nodes(templates[PLATFORM_STACK])
    # When each is matched against that node
    landing = {
        (role, pod.where) for role, pod, terms in pods if role != "daemon" and lands(pod, terms, nodes)
    }
    # Then what lands there besides the DaemonSets is the gang (and, on the nodegroup, the dataset pods)
    assert {role for role, _ in landing} == EXPECTED[variant], sorted(landing)
    # The walk saw every source: manifests, the submitted job, the charts' and the add-ons' pods
    wheres = " ".join(pod.where for _, pod, _ in pods)
    for source in (
        "submitted Volcano Job",
        "kube-prometheus-stack Deployment grafana",
        "add-on aws-ebs-csi-driver",
    ):
        assert source in wheres, source


@pytest.mark.parametrize(
    ("variant", "roles", "pool"),
    [
        ("default", ("dataset-staging", "heldout-staging"), DATASET_POOL_NAME),
        ("preparation on", ("dataset-preparation",), PREPARATION_POOL_NAME),
    ],
)
def test_given_karpenter_then_the_dataset_pods_land_on_cpu_nodes_of_their_own(variant, roles, pool):
    templates, pods = _walk(variant)
    platform = templates[PLATFORM_STACK]
    mine = [(pod, terms) for r, pod, terms in pods if r in roles]
    assert {r for r, _, _ in pods if r in roles} == set(roles)
    for pod, terms in mine:
        assert lands(pod, terms, pool_nodes(platform, pool)), pod.where
        assert not lands(pod, terms, trainium_nodes(platform)), pod.where
    # and nothing but them lands there, besides DaemonSets
    others = {
        p.where for r, p, t in pods if r not in ("daemon", *roles) and lands(p, t, pool_nodes(platform, pool))
    }
    assert others == set()


@pytest.mark.parametrize("variant", ["default", "preparation on"])
def test_given_karpenter_then_each_daemonset_of_the_cpu_pools_also_runs_on_the_trainium_pool(variant):
    # The preparation's synth check subtracts the Trainium nodes' DaemonSets from a preparation
    # node (trainium_eks.jobs.dataset_preparation.check_preparation_nodes): they must include
    # every DaemonSet of that node.
    templates, pods = _walk(variant)
    platform = templates[PLATFORM_STACK]
    trainium = trainium_nodes(platform)
    for pool in (DATASET_POOL_NAME, PREPARATION_POOL_NAME):
        nodes = pool_nodes(platform, pool)
        there = [(pod, terms) for role, pod, terms in pods if role == "daemon" and lands(pod, terms, nodes)]
        assert any("fsx-csi-node" in pod.where for pod, _ in there), pool  # the pods mount FSx
        assert [pod.where for pod, terms in there if not lands(pod, terms, trainium)] == [], pool


def test_given_the_pool_labels_then_each_is_a_node_pool_label_value_of_its_own():
    platform = synth_app()[PLATFORM_STACK]
    values = [
        pool_nodes(platform, name)[0]["metadata"]["labels"][NODE_POOL_LABEL_KEY]
        for name in (
            NODE_POOL_NAME,
            DATASET_POOL_NAME,
            PREPARATION_POOL_NAME,
        )
    ]
    assert len(set(values)) == 3, values
