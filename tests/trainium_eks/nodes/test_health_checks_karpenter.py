"""The node health check's DaemonSet in Karpenter's arithmetic, by Karpenter's own rules.

Karpenter adds the requests of every DaemonSet that can land on a node to that node's overhead:
for a node it plans, the DaemonSets compatible with the NodePool's template; for a node already
launched, those compatible with its labels. The check holds all 16 Neuron devices, so if it were
counted on a planned node no training pod would ever fit one and no Trainium node would launch.

The oracle below is Karpenter's compatibility logic at kubernetes-sigs/karpenter v1.14.1 (commit
6e7eab7a, the one aws/karpenter-provider-aws v1.14.1 builds against: its go.mod L49), reduced to
the four operators the objects use (``In``, ``NotIn``, ``Exists``, ``DoesNotExist``) and cited
line by line; it is not the project's label matcher (tests/trainium_eks/nodes/test_health_checks.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from trainium_eks.nodes.health_checks import KARPENTER_INITIALIZED_LABEL, health_check_daemonset
from trainium_eks.nodes.node_pool import node_pool
from trainium_job.instances import instance_facts
from trainium_job.scheduling import TRAINIUM_NODE_LABEL

TRN1 = instance_facts("trn1.32xlarge")
#: Karpenter's label keys (pkg/apis/v1/labels.go L41-43).
NODEPOOL_LABEL = "karpenter.sh/nodepool"
REGISTERED_LABEL = "karpenter.sh/registered"
#: ``WellKnownLabels`` (pkg/apis/v1/labels.go L75-84), which the planned-node check lets a pod
#: require though the template leaves them undefined (scheduler.go L1030).
WELL_KNOWN_LABELS = frozenset(
    {
        NODEPOOL_LABEL,
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "node.kubernetes.io/instance-type",
        "kubernetes.io/arch",
        "kubernetes.io/os",
        "karpenter.sh/capacity-type",
        "node.kubernetes.io/windows-build",
    }
)


@dataclass(frozen=True)
class Requirement:
    """pkg/scheduling/requirement.go L36-43: a value set, or its complement."""

    complement: bool
    values: frozenset[str]

    @classmethod
    def of(cls, operator: str, values: Iterable[str] = ()) -> Requirement:
        # L61-86: In and DoesNotExist are sets (DoesNotExist the empty one); NotIn and Exists
        # complements (Exists of the empty set). Only In and NotIn keep their values.
        if operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise ValueError(f"the oracle does not model {operator}")
        kept = frozenset(values) if operator in ("In", "NotIn") else frozenset()
        return cls(complement=operator in ("NotIn", "Exists"), values=kept)

    @property
    def operator(self) -> str:
        # L290-301 (a complement of finitely many values is NotIn unless empty: L303-307).
        if self.complement:
            return "NotIn" if self.values else "Exists"
        return "In" if self.values else "DoesNotExist"

    def has_intersection(self, other: Requirement) -> bool:
        # L220-254, without numeric bounds (no Gt/Lt here).
        if self.complement and other.complement:
            return True
        if self.complement:
            return any(v not in self.values for v in other.values)
        if other.complement:
            return any(v not in other.values for v in self.values)
        return bool(self.values & other.values)

    def intersection(self, other: Requirement) -> Requirement:
        # L181-214.
        if self.complement and other.complement:
            return Requirement(True, self.values | other.values)
        if self.complement:
            return Requirement(False, other.values - self.values)
        if other.complement:
            return Requirement(False, self.values - other.values)
        return Requirement(False, self.values & other.values)


Requirements = dict[str, Requirement]


def _add(requirements: Requirements, key: str, requirement: Requirement) -> None:
    # pkg/scheduling/requirements.go L133-140: a key given twice keeps the intersection.
    requirements[key] = requirement.intersection(requirements[key]) if key in requirements else requirement


def _get(requirements: Requirements, key: str) -> Requirement:
    # requirements.go L160-166: an undefined key reads as Exists.
    return requirements.get(key, Requirement.of("Exists"))


def label_requirements(labels: Mapping[str, str]) -> Requirements:
    # requirements.go L65-71: each label In its value.
    return {key: Requirement.of("In", [value]) for key, value in labels.items()}


def intersects(existing: Requirements, incoming: Requirements) -> bool:
    # requirements.go L254-274: every shared key must intersect, but two absences (NotIn or
    # DoesNotExist on both sides) never conflict.
    for key in existing.keys() & incoming.keys():
        old, new = _get(existing, key), _get(incoming, key)
        if old.has_intersection(new):
            continue
        absent = ("NotIn", "DoesNotExist")
        if new.operator in absent and old.operator in absent:
            continue
        return False
    return True


def compatible(node: Requirements, pod: Requirements, allow_undefined: frozenset[str] = frozenset()) -> bool:
    # requirements.go L181-197: a key the pod names must be defined on the node, unless allowed
    # undefined or the pod asks for its absence (NotIn, DoesNotExist); then Intersects.
    for key in pod:
        if key in allow_undefined:
            continue
        if key in node or _get(pod, key).operator in ("NotIn", "DoesNotExist"):
            continue
        return False
    return intersects(node, pod)


def pod_requirement_terms(pod_spec: Mapping[str, Any]) -> list[Requirements]:
    """``NewStrictPodRequirements`` for each required node-affinity term in turn: the nodeSelector
    In its values, with that term's expressions (requirements.go L79-110; scheduler.go L1027-1042
    tries the next term while one is left)."""
    terms = (
        pod_spec.get("affinity", {})
        .get("nodeAffinity", {})
        .get("requiredDuringSchedulingIgnoredDuringExecution", {})
        .get("nodeSelectorTerms", [])
    ) or [{"matchExpressions": []}]
    result = []
    for term in terms:
        requirements = label_requirements(pod_spec.get("nodeSelector", {}))
        for e in term.get("matchExpressions", []):
            _add(requirements, e["key"], Requirement.of(e["operator"], e.get("values", [])))
        result.append(requirements)
    return result


def tolerates(tolerations: Iterable[Mapping[str, Any]], taints: Iterable[Mapping[str, str]]) -> bool:
    """Every taint tolerated (pkg/scheduling/taints.go L78-95, by k8s.io/api core/v1
    toleration.go ``ToleratesTaint``), PreferNoSchedule ignored for a daemon (scheduler.go L1022-1023)."""

    def one(t: Mapping[str, Any], taint: Mapping[str, str]) -> bool:
        if t.get("effect") and t["effect"] != taint["effect"]:
            return False
        if t.get("key") and t["key"] != taint["key"]:
            return False
        return t.get("operator", "Equal") == "Exists" or t.get("value", "") == taint.get("value", "")

    tolerations = list(tolerations)
    return all(
        taint["effect"] == "PreferNoSchedule" or any(one(t, taint) for t in tolerations) for taint in taints
    )


def planned_node(pool: Mapping[str, Any]) -> tuple[Requirements, list[dict[str, str]]]:
    """A node Karpenter plans for ``pool``: its requirements and taints (``NewNodeClaimTemplate``,
    pkg/controllers/provisioning/scheduling/nodeclaimtemplate.go L66-92): the NodePool's
    requirements, its labels with the nodepool's own, and ``registered`` and ``initialized``
    In [true] "for DaemonSet scheduling calculations" (L86-89). Its taints are the NodePool's
    ``taints``, not its ``startupTaints`` (scheduler.go L1024)."""
    template = pool["spec"]["template"]
    requirements: Requirements = {}
    for r in template["spec"]["requirements"]:
        _add(requirements, r["key"], Requirement.of(r["operator"], r.get("values", [])))
    labels = {**template["metadata"]["labels"], NODEPOOL_LABEL: pool["metadata"]["name"]}
    for key, requirement in label_requirements(labels).items():
        _add(requirements, key, requirement)
    for key in (REGISTERED_LABEL, KARPENTER_INITIALIZED_LABEL):
        _add(requirements, key, Requirement.of("In", ["true"]))
    return requirements, list(template["spec"].get("taints", []))


def counted_on_planned_node(pool: Mapping[str, Any], daemon_pod: Mapping[str, Any]) -> bool:
    """``isDaemonPodCompatible`` (scheduler.go L1019-1043): the daemon's requests are part of a
    planned node's overhead (L972-1004) exactly when this holds."""
    requirements, taints = planned_node(pool)
    if not tolerates(daemon_pod.get("tolerations", []), taints):
        return False
    # The instance type's own requirements: only its name matters to these objects (L1030-1033).
    instance_type = {"node.kubernetes.io/instance-type": Requirement.of("In", [TRN1.name])}
    return any(
        compatible(requirements, terms, WELL_KNOWN_LABELS) and intersects(instance_type, terms)
        for terms in pod_requirement_terms(daemon_pod)
    )


def counted_on_launched_node(labels: Mapping[str, str], daemon_pod: Mapping[str, Any]) -> bool:
    """``isDaemonPodCompatibleWithNode`` (scheduler.go L823-832) on a launched node's labels: its
    NodeClaim's until it registers, then the Node's (pkg/controllers/state/statenode.go L296-309)."""
    return any(compatible(label_requirements(labels), terms) for terms in pod_requirement_terms(daemon_pod))


def _pool() -> dict[str, Any]:
    return node_pool(
        facts=TRN1, az_id="usw2-az4", max_nodes=2, idle_minutes=10, reserved=False, health_check=True
    )


def _check_pod() -> dict[str, Any]:
    daemonset = health_check_daemonset(namespace="training", image="img", facts=TRN1, replace=True)
    return daemonset["spec"]["template"]["spec"]


def _with_initialized(pod_spec: Mapping[str, Any], expression: dict[str, Any] | None) -> dict[str, Any]:
    """``pod_spec`` with its ``karpenter.sh/initialized`` expression replaced (None: removed)."""
    (term,) = pod_spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    kept = [e for e in term["matchExpressions"] if e["key"] != KARPENTER_INITIALIZED_LABEL]
    new = [*kept, *([dict(expression, key=KARPENTER_INITIALIZED_LABEL)] if expression else [])]
    affinity = {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": new}]}
    }
    return {**pod_spec, "affinity": {"nodeAffinity": affinity}}


#: A Trainium node of the pool once launched: its NodeClaim's labels (the NodePool's, its name,
#: the single-valued requirements; never ``registered`` or ``initialized``: nodeclaimtemplate.go
#: L40-46, L94-107), then the Node's, which get ``registered`` at registration and
#: ``initialized`` once every startup taint is gone (pkg/controllers/nodeclaim/lifecycle/
#: registration.go, initialization.go L74-93).
IN_FLIGHT = {
    **TRAINIUM_NODE_LABEL,
    NODEPOOL_LABEL: "trainium",
    "node.kubernetes.io/instance-type": TRN1.name,
    "topology.k8s.aws/zone-id": "usw2-az4",
    "karpenter.sh/capacity-type": "on-demand",
}
REGISTERED = {**IN_FLIGHT, REGISTERED_LABEL: "true"}
INITIALIZED = {**REGISTERED, KARPENTER_INITIALIZED_LABEL: "true"}


def test_given_a_planned_trainium_node_then_karpenter_leaves_the_check_out_of_its_overhead():
    # Counted, its 16 devices would leave none for the training pod: Karpenter would launch no node.
    assert not counted_on_planned_node(_pool(), _check_pod())


@pytest.mark.parametrize(
    "expression",
    [
        None,
        {"operator": "Exists"},
        {"operator": "In", "values": ["true"]},
        {"operator": "NotIn", "values": ["x"]},
    ],
    ids=["no rule", "Exists", "In true", "NotIn"],
)
def test_given_any_other_initialized_rule_then_karpenter_would_count_the_check(expression):
    # The oracle tells the rules apart: only the label's absence keeps the check out.
    assert counted_on_planned_node(_pool(), _with_initialized(_check_pod(), expression))


def test_given_a_daemonset_of_every_trainium_node_then_the_oracle_counts_it():
    # A daemon with the same node selector and tolerations but no affinity is overhead of every
    # planned node (the device plugins are): the oracle does not exclude everything.
    pod = {k: v for k, v in _check_pod().items() if k != "affinity"}
    assert counted_on_planned_node(_pool(), pod)


def test_given_a_real_node_then_the_check_runs_until_karpenter_marks_it_initialized():
    # The same rule must not keep the check off the nodes it is for: a registered node is not
    # initialized while the pending startup taint is on it, and only the check lifts that taint.
    pod = _check_pod()
    assert counted_on_launched_node(REGISTERED, pod)
    assert not counted_on_launched_node(INITIALIZED, pod)


def test_given_a_node_still_launching_then_karpenter_counts_the_check_on_it():
    # The other side of the rule (read in the source, not run): on a node launched but not yet
    # initialized, the check is overhead, so a waiting training pod does not fit there and
    # Karpenter plans another node for it, as far as the NodePool's limit allows. With
    # max_nodes = desired_nodes (the default) the limit leaves no room; above it, the review
    # warns (trainium_eks.nodes.node_pool.karpenter_warnings).
    pod = _check_pod()
    assert counted_on_launched_node(IN_FLIGHT, pod)
