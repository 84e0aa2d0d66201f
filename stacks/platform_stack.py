"""The platform stack: network, cluster, nodegroups, storage, add-ons and the training job."""

from __future__ import annotations

from typing import Any

from aws_cdk import Environment, Stack, Tags
from constructs import Construct

from trainium_eks.addons import TrainiumAddons
from trainium_eks.cluster import TrainiumCluster
from trainium_eks.config import PlatformConfig
from trainium_eks.fsx import TrainingFileSystem
from trainium_eks.fsx_csi import FsxCsiVolume
from trainium_eks.nag import OPTIONAL_ACKNOWLEDGEMENTS, suppress_platform_findings
from trainium_eks.network import TrainiumNetwork
from trainium_eks.nodegroup import NeuronNodegroup
from trainium_eks.registry import TrainingImageRepository

from .training import add_training


class TrainiumPlatformStack(Stack):
    """Everything a Trainium training job needs, composed from the library's constructs.

    The stack pins only its region: with no account it asks AWS nothing at synth, and the AZs come
    from the configuration as AZ IDs.
    """

    def __init__(self, scope: Construct, id: str, *, config: PlatformConfig, **kwargs: Any) -> None:
        super().__init__(
            scope,
            id,
            env=Environment(region=config.region),
            stack_name=f"{config.name_prefix}-platform",
            description=f"Trainium EKS platform ({config.instance_type} x {config.desired_nodes})",
            **kwargs,
        )
        self.config = config
        self.network = TrainiumNetwork(
            self,
            "Network",
            az_ids=(config.trainium_az_id, config.second_az_id),
            cidr=config.vpc_cidr,
            nat_gateways=config.nat_gateways,
            existing_vpc_id=config.existing_vpc_id,
            existing_private_subnet_ids=config.existing_private_subnet_ids,
        )
        self.cluster = TrainiumCluster(
            self,
            "Cluster",
            vpc=self.network.vpc,
            subnets=self.network.private_subnets,
            kubernetes_version=config.kubernetes_version,
            endpoint_public_cidrs=config.endpoint_public_cidrs,
            admin_principal_arns=config.admin_principal_arns,
            system_nodes=config.system_nodes,
        )
        self.trainium = NeuronNodegroup(
            self,
            "Trainium",
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
        self.storage = TrainingFileSystem(
            self,
            "Storage",
            vpc=self.network.vpc,
            subnet=self.network.trainium_subnet,
            # Both nodegroups are EKS managed nodegroups: their nodes carry the cluster group.
            client_security_group_ids=[self.cluster.cluster.cluster_security_group_id],
            deployment_type=config.fsx_deployment_type,
            storage_gib=config.fsx_storage_gib,
            throughput_per_tib=config.fsx_throughput_per_tib,
            compression=config.fsx_compression,
            s3_import_uri=config.fsx_s3_import_uri,
            s3_export_uri=config.fsx_s3_export_uri,
        )
        self.storage_volume = FsxCsiVolume(
            self,
            "StorageVolume",
            cluster=self.cluster.cluster,
            file_system=self.storage,
        )
        self.registry = TrainingImageRepository(
            self,
            "Registry",
            repository_name=f"{config.name_prefix}/training",
            keep_images=config.ecr_keep_images,
        )
        # [addons] Neuron, EFA, Volcano, etcd and observability add-ons (issue 3b).
        self.addons = TrainiumAddons(
            self,
            "Addons",
            cluster=self.cluster,
            trainium=self.trainium,
            max_nodes=config.max_nodes,
            neuron_scheduler_extension=config.neuron_scheduler_extension,
            neuron_node_problem_detector=config.neuron_node_problem_detector,
            etcd_enabled=config.etcd_enabled,
            container_insights=config.container_insights,
        )
        # The FSx CSI controller gets AWS credentials from Pod Identity: the agent comes first.
        self.storage_volume.driver.node.add_dependency(self.addons.observability.pod_identity_agent)
        # So does the VPC CNI on every node (no CNI permissions on the node role): agent and CNI
        # add-ons exist before any node joins.
        for nodegroup in (self.cluster.system_nodegroup, self.trainium.nodegroup):
            nodegroup.node.add_dependency(self.addons.observability.pod_identity_agent, self.cluster.vpc_cni)
        # [training] images, dataset staging, the pretraining job and TensorBoard (issue 5).
        self.training = add_training(self, config) if config.training_enabled else None
        for key, value in sorted(config.tags.items()):
            Tags.of(self).add(key, value)
        suppress_platform_findings(
            self, {option: getattr(config, option) for option in OPTIONAL_ACKNOWLEDGEMENTS}
        )
