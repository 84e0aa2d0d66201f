"""Node labels and taints: the well-known labels a node carries, how an EKS managed nodegroup's
labels and taints reach its nodes, and how a toleration matches a taint.

Version: Kubernetes 1.34-1.36, Amazon EKS managed nodegroups (2026).
"""

from __future__ import annotations

from tests.contracts.model import Contract, Entry

_WELL_KNOWN = "kubernetes.io, 'Well-Known Labels, Annotations and Taints'"
_EKS_API = "Amazon EKS API Reference, CreateNodegroup (labels, taints) and Taint (effect)"

#: Labels every node carries without any configuration of ours.
WELL_KNOWN_LABELS = Contract(
    consumer="kubelet / cloud provider / EKS",
    version="Kubernetes 1.34-1.36",
    entries=(
        Entry("node.kubernetes.io/instance-type", "the node's EC2 instance type", _WELL_KNOWN),
        Entry("kubernetes.io/os", "the node's operating system (linux)", _WELL_KNOWN),
        Entry("kubernetes.io/arch", "the node's CPU architecture", _WELL_KNOWN),
        Entry("topology.kubernetes.io/zone", "the node's Availability Zone (name)", _WELL_KNOWN),
        Entry("kubernetes.io/hostname", "the node's host name", _WELL_KNOWN),
        Entry(
            "eks.amazonaws.com/nodegroup",
            "the managed nodegroup's name",
            "Amazon EKS User Guide, 'Managed node groups' (labels EKS adds to managed nodes)",
        ),
        Entry(
            "eks.amazonaws.com/capacityType",
            "ON_DEMAND, SPOT or CAPACITY_BLOCK",
            "Amazon EKS User Guide, 'Managed node groups' (labels EKS adds to managed nodes)",
        ),
        Entry(
            "eks.amazonaws.com/compute-type",
            "set on Fargate, hybrid and Auto Mode nodes (the charts' affinities exclude those)",
            "aws/eks-charts@bfe91c4:stable/aws-efa-k8s-device-plugin/templates/daemonset.yaml:60-63",
        ),
    ),
)

#: A nodegroup's ``Labels`` become node labels as given; its ``Taints`` become node taints, the
#: effect mapped from the EKS API's names.
EKS_TAINT_EFFECTS = {
    "NO_SCHEDULE": "NoSchedule",
    "NO_EXECUTE": "NoExecute",
    "PREFER_NO_SCHEDULE": "PreferNoSchedule",
}
EKS_NODEGROUP_SOURCE = (
    f"{_EKS_API}; Amazon EKS User Guide, 'Prevent Pods from being scheduled on specific nodes' "
    "(NO_SCHEDULE corresponds to the Kubernetes NoSchedule effect)"
)

#: How a toleration matches a taint: same key (an empty key with Exists matches every key), same
#: effect (an empty effect matches every effect), and operator Exists or an equal value.
TOLERATION_SOURCE = "kubernetes.io, 'Taints and Tolerations' (operator Equal/Exists, empty key and effect)"


def tolerates(toleration: dict[str, str], taint: dict[str, str]) -> bool:
    """Whether ``toleration`` tolerates ``taint`` (:data:`TOLERATION_SOURCE`)."""
    operator = toleration.get("operator", "Equal")
    key = toleration.get("key", "")
    if key and key != taint["key"]:
        return False
    if not key and operator != "Exists":
        return False
    effect = toleration.get("effect", "")
    if effect and effect != taint["effect"]:
        return False
    return operator == "Exists" or toleration.get("value", "") == taint.get("value", "")
