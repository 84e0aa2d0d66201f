"""Every cluster add-on, in the order :class:`~trainium_eks.addons.trainium_addons.TrainiumAddons`
builds them (an add-on comes after those its ``after`` names; the order is also the templates'
resource order, so a new add-on goes last).

Adding an add-on: its module with its pins and an ``ADDON`` declaration
(:class:`~trainium_eks.addons.addon.AddOn`), its line here and its test;
tests/trainium_eks/addons/test_registry.py fails for a module left out, and the configuration
reference's add-on table (``make docs``) lists it.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainium_job.instances import InstanceFacts

from ..cluster.eks_cluster import VPC_CNI
from ..storage import fsx_csi
from . import ebs_csi, efa, etcd, monitoring, neuron, observability, volcano
from .addon import AddOn
from .node_daemons import KUBE_PROXY, DaemonSettings, NodeDaemon, addon_daemons, pinned_chart_daemons

ADDONS: tuple[AddOn, ...] = (
    observability.ADDON,
    neuron.ADDON,
    efa.ADDON,
    volcano.ADDON,
    ebs_csi.ADDON,
    monitoring.ADDON,
    etcd.ADDON,
)


@dataclass(frozen=True, kw_only=True)
class NodeDaemonSettings:
    """:class:`~trainium_eks.addons.node_daemons.DaemonSettings` from keyword arguments (each
    default documented at :func:`trainium_node_daemons`)."""

    facts: InstanceFacts
    region: str
    neuron_node_problem_detector: bool
    container_insights: bool
    etcd_enabled: bool
    monitoring_enabled: bool
    monitoring_neuron_monitor: bool
    monitoring_exporters: bool
    training_enabled: bool


def trainium_node_daemons(
    *,
    facts: InstanceFacts,
    region: str,
    neuron_node_problem_detector: bool = False,
    container_insights: bool = False,
    etcd_enabled: bool = True,
    monitoring: bool = True,
    neuron_monitor: bool = True,
    exporters: bool = True,
) -> tuple[NodeDaemon, ...]:
    """Every DaemonSet the platform runs on a Trainium node of ``facts``, for the add-on options
    given (the platform's settings of the same names, ``monitoring_enabled``,
    ``monitoring_neuron_monitor`` and ``monitoring_exporters`` for the last three; defaults are
    theirs)."""
    return configured_node_daemons(
        NodeDaemonSettings(
            facts=facts,
            region=region,
            neuron_node_problem_detector=neuron_node_problem_detector,
            container_insights=container_insights,
            etcd_enabled=etcd_enabled,
            monitoring_enabled=monitoring,
            monitoring_neuron_monitor=neuron_monitor,
            monitoring_exporters=exporters,
            training_enabled=True,
        )
    )


def configured_node_daemons(c: DaemonSettings) -> tuple[NodeDaemon, ...]:
    """The DaemonSets on a Trainium node for the platform settings ``c``: the cluster's own
    (kube-proxy, the VPC CNI), the FSx CSI driver's (the storage volume, not an add-on here),
    then each add-on's in the registry's order."""
    daemons: list[NodeDaemon] = [KUBE_PROXY, *addon_daemons(VPC_CNI)]
    daemons += pinned_chart_daemons(fsx_csi.CHART, fsx_csi.driver_values(c.region), c.facts.name)
    for declared in ADDONS:
        daemons += declared.daemons(c)
    return tuple(daemons)
