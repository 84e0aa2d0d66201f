"""The Trainium managed nodegroup: Neuron AMI, launch template with EFA, one AZ, tainted."""

from __future__ import annotations

from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from trainium_job.instances import InstanceFacts
from trainium_job.scheduling import NEURON_TAINT, NEURON_TAINT_KEY, TRAINIUM_NODE_LABEL, WORKLOAD_TOLERATION

from .cluster import node_role
from .launch_template import TrainiumLaunchTemplate

__all__ = [
    "NEURON_TAINT",
    "NEURON_TAINT_KEY",
    "TRAINIUM_NODE_LABEL",
    "TRAINIUM_TOLERATION",
    "NeuronNodegroup",
    "TrainiumNodegroup",
]

#: Former name of :data:`trainium_job.scheduling.WORKLOAD_TOLERATION`.
TRAINIUM_TOLERATION = WORKLOAD_TOLERATION


class TrainiumNodegroup(Construct):
    """Trainium nodes for training.

    Built with ``eks.Nodegroup`` rather than ``Cluster.add_nodegroup_capacity`` (which applies a
    bundled, stale Neuron device-plugin manifest for Trainium types). The instance type lives in the
    launch template, so the nodegroup lists none and can use the ``AL2023_x86_64_NEURON`` AMI type
    (the L2 rejects that AMI type next to trn1 instance types). Node auto-repair is on.

    Attributes:
        nodegroup: the managed nodegroup.
        launch_template: the :class:`TrainiumLaunchTemplate` (EFA group, placement group).
        facts: the instance-type facts row.
        subnet: the single subnet the nodes live in.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: eks.ICluster,
        facts: InstanceFacts,
        subnet: ec2.ISubnet,
        min_size: int = 2,
        desired_size: int = 2,
        max_size: int = 2,
        root_volume_gib: int = 512,
        efa_layout: str = "efa",
        capacity_reservation_id: str | None = None,
        capacity_block: bool = False,
        name_prefix: str = "trn",
    ) -> None:
        super().__init__(scope, id)
        self.facts = facts
        self.subnet = subnet
        self.launch_template = TrainiumLaunchTemplate(
            self,
            "LaunchTemplate",
            facts=facts,
            vpc=cluster.vpc,
            cluster_security_group_id=cluster.cluster_security_group_id,
            root_volume_gib=root_volume_gib,
            efa_layout=efa_layout,
            capacity_reservation_id=capacity_reservation_id,
            capacity_block=capacity_block,
            name_prefix=name_prefix,
        )
        lt = self.launch_template.launch_template
        self.nodegroup = eks.Nodegroup(
            self,
            "Nodegroup",
            cluster=cluster,
            ami_type=eks.NodegroupAmiType.AL2023_X86_64_NEURON,
            capacity_type=eks.CapacityType.CAPACITY_BLOCK if capacity_block else eks.CapacityType.ON_DEMAND,
            launch_template_spec=eks.LaunchTemplateSpec(id=lt.ref, version=lt.attr_latest_version_number),
            node_role=node_role(self, "NodeRole"),
            subnets=ec2.SubnetSelection(subnets=[subnet]),
            min_size=min_size,
            desired_size=desired_size,
            max_size=max_size,
            labels=dict(TRAINIUM_NODE_LABEL),
            taints=[
                eks.TaintSpec(
                    key=NEURON_TAINT["key"], value=NEURON_TAINT["value"], effect=eks.TaintEffect.NO_SCHEDULE
                )
            ],
            enable_node_auto_repair=True,
        )


#: Former name of :class:`TrainiumNodegroup`, kept for existing apps.
NeuronNodegroup = TrainiumNodegroup
