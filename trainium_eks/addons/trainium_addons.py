"""The cluster's add-ons composed for Trainium training, with the ordering they need:

* Neuron and EFA device plugins after the Trainium nodegroup (they run only there);
* managed add-ons, Volcano and etcd after the system nodegroup (their pods run there);
* the EBS CSI driver after the pod identity agent (its credentials come from it), etcd and the
  monitoring stack after the driver and its StorageClass (their volumes), the training Queue
  after Volcano (its CRDs and webhook).
"""

from __future__ import annotations

from constructs import Construct, IConstruct

from trainium_job.naming import DEFAULT_NAME_PREFIX
from trainium_job.scheduling import TRAINING_QUEUE

from ..arguments import AnyCluster, require_cluster
from ..monitoring.karpenter_capacity import KarpenterCapacity
from ..nodes.node_pool import NODE_POOL_NAME, TrainiumNodePool
from ..nodes.nodegroup import TrainiumNodegroup
from . import (
    EbsCsiDriver,
    EfaDevicePlugin,
    EtcdServer,
    MonitoringOptions,
    NeuronDevicePlugin,
    ObservabilityAddons,
    PlatformMonitoring,
    VolcanoScheduler,
)

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
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: AnyCluster,
        trainium: TrainiumNodegroup | TrainiumNodePool,
        max_nodes: int,
        system_nodes: IConstruct | None = None,
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
            system_nodes: the nodes the controllers run on (Volcano, etcd, monitoring, managed
                add-ons), e.g. :class:`TrainiumCluster`'s ``.system_nodegroup``: those add-ons are
                applied after them. Default None: no ordering (the cluster already has nodes).
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
        eks_cluster = require_cluster(cluster)
        after_system_nodes = (system_nodes,) if system_nodes is not None else ()
        facts = trainium.facts

        self.observability = ObservabilityAddons(
            self, "Observability", cluster=eks_cluster, container_insights=container_insights
        )
        # The pod identity agent comes before the nodes (they need it for the VPC CNI's
        # credentials; the stack orders the nodegroups after it); the rest runs on system nodes.
        for addon in (self.observability.node_monitoring_agent, self.observability.cloudwatch):
            if addon is not None:
                addon.node.add_dependency(*after_system_nodes)

        self.neuron = NeuronDevicePlugin(
            self,
            "Neuron",
            cluster=eks_cluster,
            scheduler_extension=neuron_scheduler_extension,
            node_problem_detector=neuron_node_problem_detector,
            health_check=health_check,
        )
        self.neuron.chart.node.add_dependency(trainium.capacity)
        self.efa = None
        if facts.multi_node:
            self.efa = EfaDevicePlugin(
                self, "Efa", cluster=eks_cluster, facts=facts, health_check=health_check
            )
            self.efa.chart.node.add_dependency(trainium.capacity)

        self.volcano = VolcanoScheduler(
            self,
            "Volcano",
            cluster=eks_cluster,
            facts=facts,
            max_nodes=max_nodes,
            queue_name=queue_name,
            nodes_on_demand=isinstance(trainium, TrainiumNodePool),
        )
        self.volcano.chart.node.add_dependency(*after_system_nodes)
        self.queue_name = self.volcano.queue_name

        self.ebs_csi = None
        self.etcd = None
        self.etcd_endpoint = None
        self.monitoring = None
        if not (etcd_enabled or monitoring_enabled):
            return
        ebs_csi = self.ebs_csi = EbsCsiDriver(self, "EbsCsi", cluster=eks_cluster)
        ebs_csi.node.add_dependency(*after_system_nodes, self.observability.pod_identity_agent)
        if monitoring_enabled:
            self.monitoring = PlatformMonitoring(
                self,
                "Monitoring",
                cluster=eks_cluster,
                storage_class_name=ebs_csi.storage_class_name,
                options=monitoring,
                amp_alias=f"{name_prefix}-metrics",
                karpenter_capacity=(
                    KarpenterCapacity(
                        node_pool=NODE_POOL_NAME, instance_type=facts.name, az_id=trainium.az_id
                    )
                    if isinstance(trainium, TrainiumNodePool)
                    else None
                ),
            )
            # Its pods run on the system nodes, its volume comes from the driver, AMP's
            # credentials from the pod identity agent.
            self.monitoring.chart.node.add_dependency(
                *after_system_nodes, ebs_csi, self.observability.pod_identity_agent
            )
        if etcd_enabled:
            self.etcd = EtcdServer(
                self, "Etcd", cluster=eks_cluster, storage_class_name=ebs_csi.storage_class_name
            )
            self.etcd.node.add_dependency(*after_system_nodes, ebs_csi)
            self.etcd_endpoint = self.etcd.endpoint
