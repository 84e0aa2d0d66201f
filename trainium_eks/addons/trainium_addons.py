"""The cluster's add-ons composed for Trainium training, in the registry's order
(:data:`~trainium_eks.addons.registry.ADDONS`), each after what its declaration names:

* Neuron and EFA device plugins after the Trainium nodegroup (they run only there);
* managed add-ons, Volcano and etcd after the system nodegroup (their pods run there);
* the EBS CSI driver after the pod identity agent (its credentials come from it), etcd and the
  monitoring stack after the driver and its StorageClass (their volumes), the training Queue
  after Volcano (its CRDs and webhook).
"""

from __future__ import annotations

from collections.abc import Mapping

from constructs import Construct, IConstruct

from trainium_job import checks
from trainium_job.naming import DEFAULT_NAME_PREFIX
from trainium_job.scheduling import SYSTEM_NODE_LABEL, TRAINING_QUEUE

from ..arguments import AnyCluster, require_cluster
from ..cluster.system_nodes import check_node_selector, require_system_capacity
from ..monitoring.options import MonitoringOptions
from ..nodes.node_pool import TrainiumNodePool
from ..nodes.nodegroup import TrainiumNodegroup
from . import (
    EbsCsiDriver,
    EfaDevicePlugin,
    EtcdServer,
    NeuronDevicePlugin,
    ObservabilityAddons,
    PlatformMonitoring,
    VolcanoScheduler,
)
from .addon import AddonContext
from .registry import ADDONS

__all__ = ["TrainiumAddons"]


class TrainiumAddons(Construct):
    """Everything the cluster needs on top of its nodes to run the training job.

    Attributes:
        observability: :class:`ObservabilityAddons` (pod identity, node monitoring, insights).
        neuron: :class:`NeuronDevicePlugin`.
        efa: :class:`EfaDevicePlugin`, or None for instance types without EFA.
        volcano: :class:`VolcanoScheduler`.
        queue_name: the Volcano Queue for training jobs.
        ebs_csi: :class:`EbsCsiDriver`, or None without etcd and monitoring.
        etcd: :class:`EtcdServer`, or None when etcd is off.
        etcd_endpoint: ``host:port`` of etcd for ``--rdzv_endpoint``, or None.
        monitoring: :class:`PlatformMonitoring`, or None when monitoring is off.

    Each add-on is the attribute of its ``name`` in :data:`~trainium_eks.addons.registry.ADDONS`
    (typed here for the platform's own; a newly registered one is set all the same).
    """

    observability: ObservabilityAddons
    neuron: NeuronDevicePlugin
    efa: EfaDevicePlugin | None
    volcano: VolcanoScheduler
    ebs_csi: EbsCsiDriver | None
    etcd: EtcdServer | None
    monitoring: PlatformMonitoring | None
    queue_name: str
    etcd_endpoint: str | None

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: AnyCluster,
        trainium: TrainiumNodegroup | TrainiumNodePool,
        max_nodes: int,
        system_nodegroup: IConstruct | None = None,
        system_node_selector: Mapping[str, str] = SYSTEM_NODE_LABEL,
        neuron_scheduler_extension: bool = False,
        neuron_node_problem_detector: bool = False,
        etcd_enabled: bool = True,
        container_insights: bool = False,
        queue_name: str = TRAINING_QUEUE,
        monitoring_enabled: bool = True,
        monitoring: MonitoringOptions | None = None,
        name_prefix: str = DEFAULT_NAME_PREFIX,
        health_check: bool = False,
    ) -> None:
        """
        Args:
            cluster: the ``aws_eks_v2`` cluster: your own ``eks.Cluster``, an imported one, or
                :class:`TrainiumCluster`'s ``.cluster``.
            trainium: the :class:`TrainiumNodegroup`, or the :class:`TrainiumNodePool` of nodes
                launched per job.
            max_nodes: the Trainium nodegroup's maximum size (sizes the Queue).
            system_nodegroup: the nodegroup the controllers run on (Volcano, etcd, monitoring,
                managed add-ons), e.g. :class:`TrainiumCluster`'s ``.system_nodegroup``: those
                add-ons are applied after it. Default None: no ordering (the cluster already has
                nodes).
            system_node_selector: the labels of the nodes the controllers run on: some untainted
                nodegroup of ``cluster`` must carry them (checked at synth). Default
                ``SYSTEM_NODE_LABEL`` (``trainium-eks/pool: system``, the label
                :class:`TrainiumCluster` gives its system nodegroup).
            neuron_scheduler_extension: Neuron scheduler extension. Default False.
            neuron_node_problem_detector: Neuron node-problem-detector. Default False.
            etcd_enabled: etcd server for the etcd rendezvous. Default True.
            container_insights: CloudWatch Container Insights. Default False.
            queue_name: name of the training Queue. Default ``TRAINING_QUEUE`` ("training").
            monitoring_enabled: Prometheus, Grafana, neuron-monitor, the alerts and the dashboard.
                Default True.
            monitoring: what monitoring installs (:class:`MonitoringOptions`). Default None: its
                defaults.
            name_prefix: prefix of named AWS resources (the AMP workspace's alias). Default
                ``DEFAULT_NAME_PREFIX`` ("trn-bert"), as every construct's.
            health_check: the device plugins tolerate the node health check's pending taint
                (:mod:`trainium_eks.nodes.health_checks`). Default False.
        """
        super().__init__(scope, id)
        cluster = require_cluster(cluster)
        checks.whole_number("max_nodes", max_nodes, minimum=1)
        selector = check_node_selector(system_node_selector)
        require_system_capacity(self, cluster, selector, owner="TrainiumAddons")
        context = AddonContext(
            scope=self,
            cluster=cluster,
            trainium=trainium,
            max_nodes=max_nodes,
            system_nodegroup=system_nodegroup,
            system_node_selector=selector,
            neuron_scheduler_extension=neuron_scheduler_extension,
            neuron_node_problem_detector=neuron_node_problem_detector,
            etcd_enabled=etcd_enabled,
            container_insights=container_insights,
            queue_name=queue_name,
            monitoring_enabled=monitoring_enabled,
            monitoring=monitoring,
            name_prefix=name_prefix,
            health_check=health_check,
        )
        # The registry's order is the construct order; each add-on orders itself after its `after`.
        for addon in ADDONS:
            setattr(self, addon.name, addon.install(context))
        self.queue_name = self.volcano.queue_name
        self.etcd_endpoint = self.etcd.endpoint if self.etcd is not None else None
