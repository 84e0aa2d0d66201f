"""The platform stack: network, cluster and Trainium nodegroup from one configuration."""

from __future__ import annotations

from typing import Any

from aws_cdk import Environment, Stack, Tags
from constructs import Construct

from trainium_eks.cluster import TrainiumCluster
from trainium_eks.config import PlatformConfig
from trainium_eks.nag import suppress_platform_findings
from trainium_eks.network import TrainiumNetwork
from trainium_eks.nodegroup import NeuronNodegroup


class TrainiumPlatformStack(Stack):
    """Everything a Trainium training job needs, composed from the library's constructs.

    The stack pins only its region: with no account it asks AWS nothing at synth, and the AZs come
    from the configuration as AZ IDs.
    """

    def __init__(self, scope: Construct, id: str, *, config: PlatformConfig, **kwargs: Any) -> None:
        super().__init__(
            scope, id,
            env=Environment(region=config.region),
            stack_name=f"{config.name_prefix}-platform",
            description=f"Trainium EKS platform ({config.instance_type} x {config.desired_nodes})",
            **kwargs,
        )
        self.config = config
        self.network = TrainiumNetwork(
            self, "Network",
            az_ids=(config.trainium_az_id, config.second_az_id),
            cidr=config.vpc_cidr,
            nat_gateways=config.nat_gateways,
            existing_vpc_id=config.existing_vpc_id,
            existing_private_subnet_ids=config.existing_private_subnet_ids,
        )
        self.cluster = TrainiumCluster(
            self, "Cluster",
            vpc=self.network.vpc,
            subnets=self.network.private_subnets,
            kubernetes_version=config.kubernetes_version,
            endpoint_public_cidrs=config.endpoint_public_cidrs,
            admin_principal_arns=config.admin_principal_arns,
            system_nodes=config.system_nodes,
        )
        self.trainium = NeuronNodegroup(
            self, "Trainium",
            cluster=self.cluster.cluster,
            facts=config.facts,
            subnet=self.network.trainium_subnet,
            min_size=config.min_nodes,
            desired_size=config.desired_nodes,
            max_size=config.max_nodes,
            root_volume_gib=config.root_volume_gib,
            efa_layout=config.efa_interface_layout,
            capacity_reservation_id=config.capacity_reservation_id,
            capacity_block=config.capacity_type == "capacity-block",
            name_prefix=config.name_prefix,
        )
        # [storage] FSx for Lustre, its CSI driver and volume, the ECR repository (issue 3a).
        # [addons] Neuron, EFA, Volcano, etcd and observability add-ons (issue 3b).
        for key, value in sorted(config.tags.items()):
            Tags.of(self).add(key, value)
        suppress_platform_findings(self)
