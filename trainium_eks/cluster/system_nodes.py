"""Where the controllers run: the system nodes, picked by a node selector the caller controls.

Every controller the library installs (Karpenter, Volcano, the FSx CSI controller, the Neuron
scheduler, etcd, kube-prometheus-stack) selects its nodes with one ``system_node_selector``
(default :data:`~trainium_job.scheduling.SYSTEM_NODE_LABEL`, ``trainium-eks/pool: system``,
which :class:`~trainium_eks.cluster.eks_cluster.TrainiumCluster` puts on the system nodegroup it
creates). On a cluster of the app's own, nothing may carry that label: the charts would wait for
a node until Helm's timeout fails the deploy. So each construct that places controllers checks at
synth that a nodegroup of the cluster carries the selector's labels and no taint
(:func:`require_system_capacity`), and refuses with the fix when none does.

EKS Auto Mode (aws-eks-v2's default when ``default_capacity_type`` is not given) is refused
where it clashes (:func:`refuse_auto_mode`): it runs a Karpenter of its own, beside which
:class:`~trainium_eks.nodes.node_pool.TrainiumNodePool` would install a second.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jsii
from aws_cdk import Stack, Token
from aws_cdk import aws_eks_v2 as eks
from constructs import IConstruct, IValidation

from trainium_job.errors import ConfigError
from trainium_job.scheduling import SYSTEM_NODE_LABEL

from .helm import HELM_TIMEOUT

__all__ = [
    "SYSTEM_NODE_SELECTOR_FIELD",
    "NodeCapacity",
    "auto_mode",
    "check_node_selector",
    "cluster_capacity",
    "refuse_auto_mode",
    "require_system_capacity",
]

#: The keyword every construct takes the selector by (what its errors name).
SYSTEM_NODE_SELECTOR_FIELD = "system_node_selector"
#: A label key's name part and a label value (Kubernetes API conventions, "Syntax and character
#: set" of labels: at most 63 characters, alphanumeric at both ends, ``-_.`` between).
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
#: A key's optional prefix: a DNS subdomain of at most 253 characters.
_LABEL_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
#: Taint effects of ``AWS::EKS::Nodegroup`` that keep a pod without a toleration off the node;
#: the controllers tolerate none (PREFER_NO_SCHEDULE only scores).
_BLOCKING_EFFECTS = ("NO_SCHEDULE", "NO_EXECUTE")


def _label_key_ok(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    return bool(_LABEL_NAME.match(name)) and (
        not prefix or (len(prefix) <= 253 and bool(_LABEL_PREFIX.match(prefix)))
    )


def check_node_selector(selector: object, *, field: str = SYSTEM_NODE_SELECTOR_FIELD) -> dict[str, str]:
    """``selector`` as a plain dict: at least one label, each key and value valid Kubernetes
    label syntax; :class:`ConfigError` naming ``field`` otherwise."""
    if not isinstance(selector, Mapping) or not selector:
        raise ConfigError(
            field,
            selector,
            "give the labels of the system nodes as a mapping, e.g. {'trainium-eks/pool': 'system'}",
        )
    checked: dict[str, str] = {}
    for key, value in selector.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ConfigError(field, dict(selector), "label keys and values are strings")
        if not _label_key_ok(key) or (value and not _LABEL_NAME.match(value)):
            raise ConfigError(
                field,
                dict(selector),
                f"{key}={value} is not a Kubernetes label: keys are [prefix/]name, names and values at most "
                "63 characters of letters, digits and -_. starting and ending with a letter or digit",
            )
        checked[key] = value
    return checked


def auto_mode(cluster: eks.ICluster) -> bool:
    """Whether ``cluster``, defined in this app, runs EKS Auto Mode: its ``AWS::EKS::Cluster`` has
    ``ComputeConfig.Enabled`` (aws-cdk-lib 2.275 aws-eks-v2 cluster.ts: ``isValidAutoModeConfig``
    turns it on when ``defaultCapacityType`` is unset or ``AUTOMODE``). An imported cluster: False
    (not known at synth)."""
    child = cluster.node.default_child
    if not isinstance(child, eks.CfnCluster):
        return False
    config = Stack.of(child).resolve(child.compute_config)
    return isinstance(config, dict) and config.get("enabled") is True


def refuse_auto_mode(cluster: eks.ICluster, *, owner: str, field: str = "cluster") -> None:
    """:class:`ConfigError` for a cluster in EKS Auto Mode, where ``owner`` would run a Karpenter
    controller beside Auto Mode's own (two controllers launching nodes for the same pods)."""
    if auto_mode(cluster):
        raise ConfigError(
            field,
            f"eks.Cluster {cluster.node.path} in EKS Auto Mode",
            f"{owner} installs Karpenter, and Auto Mode runs its own: two would launch nodes for the same pods; "
            "build the cluster with default_capacity_type=eks.DefaultCapacityType.NODEGROUP (default_capacity=0) "
            "and a system nodegroup labelled for the controllers (docs/library.md, 'Your own cluster')",
        )


@dataclass(frozen=True)
class NodeCapacity:
    """Nodes of the cluster as synth sees them: where they are declared, the labels every one of
    them carries, and the effects of their taints."""

    path: str
    labels: Mapping[str, str]
    taint_effects: tuple[str, ...]

    def takes(self, selector: Mapping[str, str]) -> bool:
        """Whether a pod with ``selector`` and no tolerations can be placed on these nodes."""
        return all(self.labels.get(k) == v for k, v in selector.items()) and not any(
            effect in _BLOCKING_EFFECTS for effect in self.taint_effects
        )


def _literal(value: Any) -> Any:
    return None if isinstance(value, str) and Token.is_unresolved(value) else value


def _nodegroup_capacity(nodegroup: eks.Nodegroup) -> NodeCapacity | None:
    """The labels a managed nodegroup's nodes carry: its own ``labels``, and the ones EKS and the
    kubelet put on every node that synth can know: ``kubernetes.io/os`` (Kubernetes, "Well-Known
    Labels, Annotations and Taints"), ``eks.amazonaws.com/nodegroup`` and
    ``eks.amazonaws.com/capacityType`` (EKS user guide, "Managed node groups": the labels EKS adds
    to a managed nodegroup's nodes), ``node.kubernetes.io/instance-type`` with one instance type."""
    cfn = nodegroup.node.default_child
    if not isinstance(cfn, eks.CfnNodegroup):
        return None
    stack = Stack.of(cfn)
    labels = stack.resolve(cfn.labels) or {}
    ami_type = _literal(stack.resolve(cfn.ami_type)) or ""
    known: dict[str, str] = {
        "kubernetes.io/os": "windows" if str(ami_type).startswith("WINDOWS") else "linux"
    }
    known["eks.amazonaws.com/capacityType"] = _literal(stack.resolve(cfn.capacity_type)) or "ON_DEMAND"
    name = _literal(stack.resolve(cfn.nodegroup_name))
    if isinstance(name, str):
        known["eks.amazonaws.com/nodegroup"] = name
    types = stack.resolve(cfn.instance_types) or []
    if isinstance(types, list) and len(types) == 1 and isinstance(_literal(types[0]), str):
        known["node.kubernetes.io/instance-type"] = types[0]
    taints = stack.resolve(cfn.taints) or []
    effects = tuple(str(t.get("effect", "")) for t in taints if isinstance(t, dict))
    own = {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}
    return NodeCapacity(nodegroup.node.path, {**known, **own}, effects)


def cluster_capacity(cluster: eks.ICluster) -> list[NodeCapacity] | None:
    """The nodes declared for ``cluster`` anywhere in the app: its managed nodegroups (``eks.Nodegroup``,
    ``add_nodegroup_capacity``, its default nodegroup) and its default self-managed capacity; None
    for a cluster this app does not define (imported: its nodes are not known at synth)."""
    if not isinstance(cluster.node.default_child, eks.CfnCluster):
        return None
    found = []
    for construct in cluster.node.root.node.find_all():
        if isinstance(construct, eks.Nodegroup) and construct.cluster.node.path == cluster.node.path:
            capacity = _nodegroup_capacity(construct)
            if capacity is not None:
                found.append(capacity)
    default_asg = getattr(cluster, "default_capacity", None)
    if default_asg is not None:
        found.append(NodeCapacity(default_asg.node.path, {"kubernetes.io/os": "linux"}, ()))
    return found


@jsii.implements(IValidation)
class _SystemCapacityCheck:
    """At synth, once every nodegroup is declared: some nodes of the cluster take the selector."""

    def __init__(self, cluster: eks.ICluster, selector: Mapping[str, str], owner: str) -> None:
        self._cluster, self._selector, self._owner = cluster, dict(selector), owner

    def validate(self) -> list[str]:
        capacity = cluster_capacity(self._cluster)
        if capacity is None or any(nodes.takes(self._selector) for nodes in capacity):
            return []
        labels = ", ".join(f"{k}={v}" for k, v in self._selector.items())
        declared = "; ".join(f"{c.path}: {dict(c.labels)}" for c in capacity) or "none"
        auto = " (Auto Mode's own nodes take no such labels)" if auto_mode(self._cluster) else ""
        # Raised, not returned: the error is the one ConfigError line (jsii hands it to the caller of
        # app.synth() as its message, with the ConfigError as the exception's context).
        raise ConfigError(
            SYSTEM_NODE_SELECTOR_FIELD,
            dict(self._selector),
            f"no untainted nodegroup of cluster {self._cluster.node.path} carries {labels}{auto}, so "
            f"{self._owner}'s controllers would wait for a node until Helm gives up "
            f"({int(HELM_TIMEOUT.to_minutes())} min) and the deploy fails; give your system nodegroup "
            f"labels={dict(self._selector)!r} (ami_type AL2023), or pass the labels it has as "
            f"{SYSTEM_NODE_SELECTOR_FIELD} (nodegroups seen: {declared})",
        )


def require_system_capacity(
    scope: IConstruct,
    cluster: eks.ICluster,
    selector: Mapping[str, str] = SYSTEM_NODE_LABEL,
    *,
    owner: str,
) -> None:
    """Check at synth that some untainted nodes of ``cluster`` carry ``selector``'s labels
    (:func:`cluster_capacity`); :class:`ConfigError` naming ``system_node_selector`` otherwise.
    Deferred to synth so that a nodegroup declared after ``scope`` counts."""
    scope.node.add_validation(_SystemCapacityCheck(cluster, selector, owner))
