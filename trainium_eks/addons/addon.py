"""The one interface every cluster add-on declares itself behind (:class:`AddOn`), and what it is
built from (:class:`AddonContext`).

Each add-on module holds everything about its add-on: its pins (each
:class:`~trainium_eks.versions.AddonPin` with its evidence and the Kubernetes versions it declares),
and one ``ADDON`` declaration of its name (the attribute of
:class:`~trainium_eks.addons.trainium_addons.TrainiumAddons` it becomes), the platform setting
that turns it on, those pins, what it must come after, its DaemonSets on a Trainium node and how
it is built. :mod:`trainium_eks.addons.registry` lists them in order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aws_cdk import aws_eks_v2 as eks
from constructs import Construct, IConstruct

from trainium_job.scheduling import SYSTEM_NODE_LABEL

from ..monitoring.karpenter_capacity import KarpenterCapacity
from ..monitoring.options import MonitoringOptions
from ..nodes.node_pool import NODE_POOL_NAME, TrainiumNodePool
from ..nodes.nodegroup import TrainiumNodegroup
from ..versions import AddonPin
from .node_daemons import DaemonSettings, NodeDaemon

#: What an add-on can be ordered after, besides another add-on (named by its ``name``):
#: the nodes its pods run on.
SYSTEM_NODES = "system-nodes"
TRAINIUM_CAPACITY = "trainium-capacity"
#: The Pod Identity agent (the observability add-on's), where an add-on's AWS credentials come from.
POD_IDENTITY_AGENT = "pod-identity-agent"


@dataclass(frozen=True, kw_only=True)
class AddonContext:
    """What the add-ons are built from: :class:`TrainiumAddons`' arguments, and the add-ons
    built so far (by name, a later one reads an earlier one's, e.g. the EBS StorageClass).

    Attributes (each default is TrainiumAddons' keyword argument of the same name):
        scope: the construct the add-ons are children of.
        cluster: the cluster.
        trainium: the Trainium nodegroup or NodePool.
        max_nodes: the Trainium nodes' maximum.
        system_nodegroup: the controllers' nodes, or None (no ordering).
        system_node_selector: the labels of the nodes the controllers run on.
        built: the add-ons built so far by name, None where one is off.
    """

    scope: Construct
    cluster: eks.ICluster
    trainium: TrainiumNodegroup | TrainiumNodePool
    max_nodes: int
    system_nodegroup: IConstruct | None = None
    system_node_selector: Mapping[str, str] = field(default_factory=lambda: dict(SYSTEM_NODE_LABEL))
    neuron_scheduler_extension: bool = False
    neuron_node_problem_detector: bool = False
    etcd_enabled: bool = True
    container_insights: bool = False
    queue_name: str = ""
    monitoring_enabled: bool = True
    monitoring: MonitoringOptions | None = None
    name_prefix: str = ""
    health_check: bool = False
    built: dict[str, Any] = field(default_factory=dict)

    @property
    def nodes_on_demand(self) -> bool:
        """Whether the Trainium nodes are launched per job (Karpenter) rather than kept."""
        return isinstance(self.trainium, TrainiumNodePool)

    @property
    def karpenter_capacity(self) -> KarpenterCapacity | None:
        """With nodes launched per job, what Karpenter launches (its alert's subject)."""
        if not isinstance(self.trainium, TrainiumNodePool):  # the nodes exist: nothing to launch
            return None
        return KarpenterCapacity(
            node_pool=NODE_POOL_NAME, instance_type=self.trainium.facts.name, az_id=self.trainium.az_id
        )

    def resolve(self, after: str) -> tuple[IConstruct, ...]:
        """The constructs an ``after`` entry names (none for system nodes not given)."""
        if after == SYSTEM_NODES:
            return (self.system_nodegroup,) if self.system_nodegroup is not None else ()
        if after == TRAINIUM_CAPACITY:
            return (self.trainium.capacity,)
        if after == POD_IDENTITY_AGENT:
            return (self.built["observability"].pod_identity_agent,)
        return (self.built[after],)


def _whole(construct: Any) -> Sequence[IConstruct | None]:
    return (construct,)


def _no_daemons(settings: DaemonSettings) -> Sequence[NodeDaemon]:
    return ()


@dataclass(frozen=True, kw_only=True)
class AddOn:
    """One cluster add-on, all of it in one declaration.

    Attributes:
        name: the attribute of TrainiumAddons it becomes (and how ``after`` names it).
        key: the :class:`~trainium_eks.config.PlatformSettings` field that turns it on, or None
            where it is always on (``enabled`` may still depend on the instance type).
        pins: what it installs, by the key the review and the configuration checks name it by
            (:data:`trainium_eks.compatibility.PINS` gathers every add-on's).
        after: what it is ordered after, in DependsOn order: :data:`SYSTEM_NODES`,
            :data:`TRAINIUM_CAPACITY`, :data:`POD_IDENTITY_AGENT` or an earlier add-on's name.
        enabled: whether it is installed for a context. Default None: ``key``'s setting, or
            always without a key.
        build: the construct, a child of ``context.scope``.
        dependents: the parts of the construct that take the ``after`` dependencies (None
            entries skipped). Default: the construct itself.
        daemons: its DaemonSets on a Trainium node for the settings, with their requests
            (:mod:`trainium_eks.addons.node_daemons`; what the training pod's size subtracts),
            none where it is off. Default: none.
    """

    name: str
    key: str | None
    pins: Mapping[str, AddonPin] = field(hash=False)
    after: tuple[str, ...]
    build: Callable[[AddonContext], Any]
    enabled: Callable[[AddonContext], bool] | None = None
    dependents: Callable[[Any], Sequence[IConstruct | None]] = _whole
    daemons: Callable[[DaemonSettings], Sequence[NodeDaemon]] = _no_daemons

    def install(self, context: AddonContext) -> Any:
        """Build it (when enabled) and order it after what it needs; None when off."""
        on = self.enabled(context) if self.enabled else bool(self.key is None or getattr(context, self.key))
        if not on:
            context.built[self.name] = None
            return None
        construct = context.built[self.name] = self.build(context)
        after = [c for entry in self.after for c in context.resolve(entry)]
        for part in self.dependents(construct):
            if part is not None:
                part.node.add_dependency(*after)
        return construct
