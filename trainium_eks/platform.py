"""The platform as one construct: network, cluster, Trainium nodegroup, storage, registry, add-ons.

Give it the ID ``Default`` to keep the logical IDs of a stack that composed the same constructs
directly: aws-cdk leaves path components named ``Default`` out of logical IDs
(``makeUniqueId`` in aws-cdk-lib's ``core/lib/private/uniqueid.ts``), so the VPC, the file
system, its key and the repository are not replaced when an app moves to this construct.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from aws_cdk import CfnOutput, Fn, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from trainium_job.errors import ConfigError
from trainium_job.naming import repository_name
from trainium_job.scheduling import SYSTEM_NODE_LABEL

from .addons.trainium_addons import TrainiumAddons
from .arguments import check_stack_region
from .cluster.eks_cluster import TrainiumCluster
from .cluster.system_nodes import check_node_selector
from .config import PlatformConfig
from .escape_hatch import as_icluster
from .images.repository import TrainingImageRepository
from .monitoring.fsx_alarm import FsxCapacityAlarm
from .monitoring.names import LOCAL_PORTS
from .network.vpc import TrainiumNetwork
from .nodes.health_checks import NodeReplacementRole
from .nodes.node_options import TrainiumNodeOptions
from .nodes.node_pool import NODE_POOL_NAME, TrainiumNodePool
from .nodes.nodegroup import TrainiumNodegroup
from .storage.fsx import EXPORT_COMMAND_OUTPUT, OUTPUT_PATH, TrainingFileSystem, export_task_command
from .storage.fsx_csi import FsxCsiVolume
from .storage.model_bucket import BUCKET_NAME_OUTPUT, BUCKET_URI_OUTPUT, ModelBucket
from .workload import WorkloadTarget

#: Stack outputs the platform publishes for a workload in another stack (output id, what). The
#: same for every workload setting, so deploying the workload alone never needs a platform change.
WORKLOAD_OUTPUTS = (
    ("WorkloadClusterName", "EKS cluster name"),
    ("WorkloadKubectlServiceToken", "service token of the cluster's kubectl provider"),
    ("WorkloadRepositoryName", "name of the training image repository"),
    (BUCKET_NAME_OUTPUT, "name of the model bucket"),
)


class TrainiumPlatform(Construct):
    """Everything a Trainium training workload needs, composed from the library's constructs.

    Props: ``config``, the typed platform settings (:class:`PlatformConfig`; every default is
    documented there). Only its platform fields are read: the ``training_*`` and
    ``preparation_*`` fields belong to :class:`TrainingWorkload`.

    Attributes:
        config: the settings it was built from.
        network: :class:`TrainiumNetwork` (VPC and subnets).
        cluster: :class:`TrainiumCluster` (EKS, kubectl provider, system nodegroup).
        trainium: :class:`TrainiumNodegroup` (the Trainium nodes), or with
            ``trainium_capacity=karpenter`` :class:`TrainiumNodePool` (nodes launched per job).
        node_role: the Trainium nodes' IAM role, in either mode.
        storage: :class:`TrainingFileSystem` (FSx for Lustre).
        storage_volume: :class:`FsxCsiVolume` (CSI driver, namespace, volume and claim).
        registry: :class:`TrainingImageRepository` (ECR), or None with a ``repository`` given.
        repository: the images' ECR repository (the registry's, or the one given).
        addons: :class:`TrainiumAddons` (device plugins, Volcano, etcd, observability, monitoring).
        model_bucket: :class:`ModelBucket` (S3, the trained models; its name is the stack output
            ``WorkloadModelBucketName``).
        storage_alarm: :class:`FsxCapacityAlarm` on the file system, or None without monitoring.
        node_replacement: :class:`NodeReplacementRole` (the node health check terminates a failed
            Trainium node), or None when the check or its replacement is off.
        workload_target: the :class:`WorkloadTarget` of a :class:`TrainingWorkload` in the same
            stack; :meth:`workload_target_in` gives one for a workload in another stack.

    The cdk-nag findings it accepts by design are acknowledged by the constructs that own the
    resources, each on itself (``trainium_eks.nag``).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        config: PlatformConfig,
        vpc: ec2.IVpc | None = None,
        private_subnets: Sequence[ec2.ISubnet] = (),
        repository: ecr.IRepository | None = None,
        system_node_selector: Mapping[str, str] = SYSTEM_NODE_LABEL,
    ) -> None:
        """
        Args:
            config: the platform settings (each default documented in :class:`PlatformConfig`).
            vpc: a VPC of the app's own (see :class:`TrainiumNetwork`). Default None: the one
                ``config`` describes (created, or ``existing_vpc_id``).
            private_subnets: with ``vpc``, its two private subnets, the Trainium AZ's first.
                Default ``()``: the VPC's own two private subnets.
            repository: an ECR repository of the app's own for the images. Default None: the
                platform creates one (:class:`TrainingImageRepository`).
            system_node_selector: the labels of the system nodegroup the platform creates, which
                every controller it installs selects. Default ``SYSTEM_NODE_LABEL``
                (``trainium-eks/pool: system``).
        """
        super().__init__(scope, id)
        check_stack_region(self, config.region, owner="TrainiumPlatform")
        self.config = config
        self.system_node_selector = check_node_selector(system_node_selector)
        self.network = self._network(vpc, private_subnets)
        self.cluster = TrainiumCluster(
            self,
            "Cluster",
            vpc=self.network.vpc,
            subnets=self.network.private_subnets,
            kubernetes_version=config.kubernetes_version,
            endpoint_public_cidrs=config.endpoint_public_cidrs,
            endpoint_public_allow_broad=config.endpoint_public_allow_broad,
            admin_principal_arns=config.admin_principal_arns,
            system_nodes=config.system_nodes,
            system_node_selector=self.system_node_selector,
        )
        # jsii's Cluster class lacks ICluster's kubectl_provider_options member, so mypy cannot
        # see that it implements the interface, which it does at runtime.
        eks_cluster = as_icluster(self.cluster.cluster)
        self.trainium = self._trainium(eks_cluster)
        self.storage = self._storage()
        self.storage_volume = FsxCsiVolume(
            self,
            "StorageVolume",
            cluster=eks_cluster,
            file_system=self.storage,
            system_node_selector=self.system_node_selector,
        )
        self.registry = None
        if repository is None:
            self.registry = TrainingImageRepository(
                self,
                "Registry",
                repository_name=repository_name(config.name_prefix),
                keep_images=config.ecr_keep_images,
            )
            repository = self.registry.repository
        self.repository = repository
        self.model_bucket = ModelBucket(self, "ModelBucket")
        CfnOutput(
            self,
            BUCKET_URI_OUTPUT,
            value=f"s3://{self.model_bucket.bucket_name}/",
            description="Trained models: s3://<bucket>/<run>/model/",
        )
        self.addons = self._addons()
        self.storage_alarm = self._storage_alarm()
        self.node_replacement = self._node_replacement()
        self.workload_outputs = self._workload_outputs()

    def _network(self, vpc: ec2.IVpc | None, private_subnets: Sequence[ec2.ISubnet]) -> TrainiumNetwork:
        config = self.config
        return TrainiumNetwork(
            self,
            "Network",
            az_ids=(config.trainium_az_id, config.second_az_id),
            cidr=config.vpc_cidr,
            nat_gateways=config.nat_gateways,
            existing_vpc_id=config.existing_vpc_id,
            existing_private_subnet_ids=config.existing_private_subnet_ids,
            vpc=vpc,
            private_subnets=private_subnets,
        )

    def _storage_alarm(self) -> FsxCapacityAlarm | None:
        """The file system's free-capacity alarm, with monitoring."""
        if not self.config.monitoring_enabled:
            return None
        return FsxCapacityAlarm(
            self,
            "StorageAlarm",
            file_system_id=self.storage.file_system_id,
            storage_gib=self.storage.storage_gib,
            free_percent=self.config.monitoring_fsx_free_percent,
        )

    def _trainium(self, cluster: eks.ICluster) -> TrainiumNodegroup | TrainiumNodePool:
        config = self.config
        options = TrainiumNodeOptions(
            facts=config.facts,
            subnet=self.network.trainium_subnet,
            release_version=config.ami_release_version,
            root_volume_gib=config.root_volume_gib,
            efa_layout=config.efa_interface_layout,
            fast_image_pull=config.fast_image_pull,
            capacity_reservation_id=config.capacity_reservation_id,
            capacity_block=config.capacity_type == "capacity-block",
            name_prefix=config.name_prefix,
            health_check=config.trainium_health_check,
        )
        if config.trainium_capacity == "karpenter":
            pool = TrainiumNodePool(
                self,
                "TrainiumPool",
                cluster=cluster,
                options=options,
                az_id=config.trainium_az_id,
                max_nodes=config.max_nodes,
                idle_minutes=config.trainium_idle_minutes,
                system_nodes=config.system_nodes,
                monitored=config.monitoring_enabled,
                system_node_selector=self.system_node_selector,
            )
            # The controller runs on the system nodes, with Pod Identity credentials.
            pool.karpenter.crds.node.add_dependency(self.cluster.system_nodegroup)
            return pool
        return TrainiumNodegroup(
            self,
            "Trainium",
            cluster=cluster,
            options=options,
            min_size=config.min_nodes,
            desired_size=config.desired_nodes,
            max_size=config.max_nodes,
        )

    def _node_replacement(self) -> NodeReplacementRole | None:
        """The node health check's role that terminates a failed Trainium node, when it does."""
        if not self.config.node_health_replacement:
            return None
        cluster, namespace = as_icluster(self.cluster.cluster), self.storage_volume.namespace
        if isinstance(self.trainium, TrainiumNodePool):
            return NodeReplacementRole(
                self, "NodeReplacement", cluster=cluster, node_pool=NODE_POOL_NAME, namespace=namespace
            )
        # The nodegroup's own name (GetAtt NodegroupName), the eks:nodegroup-name tag's value: the
        # L2's nodegroup_name is the Ref, "<cluster>/<nodegroup>" (aws/aws-cdk issue 22442).
        nodegroup = self.trainium.nodegroup.node.default_child
        assert isinstance(nodegroup, eks.CfnNodegroup)
        return NodeReplacementRole(
            self,
            "NodeReplacement",
            cluster=cluster,
            nodegroup_name=nodegroup.attr_nodegroup_name,
            namespace=namespace,
        )

    def _storage(self) -> TrainingFileSystem:
        config = self.config
        storage = TrainingFileSystem(
            self,
            "Storage",
            vpc=self.network.vpc,
            subnet=self.network.trainium_subnet,
            # Every node carries the cluster group: the managed nodegroups' and Karpenter's (its
            # EC2NodeClass lists it).
            client_security_group_ids=[self.cluster.cluster.cluster_security_group_id],
            deployment_type=config.fsx_deployment_type,
            storage_gib=config.fsx_storage_gib,
            throughput_per_tib=config.fsx_throughput_per_tib,
            compression=config.fsx_compression,
            s3_import_uri=config.fsx_s3_import_uri,
            s3_export_uri=config.fsx_s3_export_uri,
        )
        if config.fsx_s3_export_uri:
            # Automatic export acts on files created, changed or deleted after the association
            # exists; what was already there needs one export task.
            CfnOutput(
                self,
                EXPORT_COMMAND_OUTPUT,
                value=export_task_command(storage.file_system_id, config.region, config.fsx_s3_export_uri),
                description=f"Export the files already under {OUTPUT_PATH} on FSx to {config.fsx_s3_export_uri}",
            )
        return storage

    def _addons(self) -> TrainiumAddons:
        """The add-ons, with the Pod Identity agent and the VPC CNI ordered before what needs them."""
        config = self.config
        addons = TrainiumAddons(
            self,
            "Addons",
            cluster=self.cluster.cluster,
            system_nodegroup=self.cluster.system_nodegroup,
            system_node_selector=self.system_node_selector,
            trainium=self.trainium,
            max_nodes=config.max_nodes,
            neuron_scheduler_extension=config.neuron_scheduler_extension,
            neuron_node_problem_detector=config.neuron_node_problem_detector,
            etcd_enabled=config.etcd_enabled,
            container_insights=config.container_insights,
            monitoring_enabled=config.monitoring_enabled,
            monitoring=config.monitoring,
            name_prefix=config.name_prefix,
            health_check=config.trainium_health_check,
        )
        if addons.monitoring is not None:
            # The training pods' NetworkPolicy lives in the storage construct's namespace.
            addons.monitoring.training_manifest.node.add_dependency(self.storage_volume.namespace_manifest)
            for service, command in addons.monitoring.port_forward.items():
                CfnOutput(
                    self,
                    f"{service.title()}PortForward",
                    value=command,
                    description=f"{service.title()}: run this, then open http://localhost:{LOCAL_PORTS[service]}",
                )
        # The FSx CSI controller gets AWS credentials from Pod Identity: the agent comes first.
        self.storage_volume.driver.node.add_dependency(addons.observability.pod_identity_agent)
        # So does the VPC CNI on every node (no CNI permissions on the node role): agent and CNI
        # add-ons exist before any node joins.
        for nodes in (self.cluster.system_nodegroup, self.trainium.capacity):
            nodes.node.add_dependency(addons.observability.pod_identity_agent, self.cluster.vpc_cni)
        if isinstance(self.trainium, TrainiumNodePool):
            self.trainium.karpenter.chart.node.add_dependency(addons.observability.pod_identity_agent)
            if addons.monitoring is not None:
                # Its chart renders the ServiceMonitor only where the CRD already exists.
                self.trainium.karpenter.chart.node.add_dependency(addons.monitoring.chart)
        return addons

    def _workload_outputs(self) -> dict[str, CfnOutput]:
        """The outputs of :data:`WORKLOAD_OUTPUTS`."""
        kubectl = self.cluster.cluster.kubectl_provider
        assert kubectl is not None, "TrainiumCluster always sets kubectl_provider_options"
        values = (
            self.cluster.cluster.cluster_name,
            kubectl.service_token,
            self.repository.repository_name,
            self.model_bucket.bucket_name,
        )
        return {
            output_id: CfnOutput(self, output_id, value=value, description=f"For the training stack: {what}")
            for (output_id, what), value in zip(WORKLOAD_OUTPUTS, values, strict=True)
        }

    @property
    def workload_target(self) -> WorkloadTarget:
        """The cluster, claim, queue, repository, etcd and model bucket a :class:`TrainingWorkload` uses, with
        the platform objects its Kubernetes objects are applied after."""
        volcano = self.addons.volcano
        target = WorkloadTarget(
            cluster=as_icluster(self.cluster.cluster),
            repository=self.repository,
            namespace=self.storage_volume.namespace,
            claim_name=self.storage_volume.claim_name,
            queue_name=self.addons.queue_name,
            etcd_endpoint=self.addons.etcd_endpoint,
            claim_dependencies=(self.storage_volume.volume_manifest,),
            queue_dependencies=(volcano.chart, volcano.queue),
            etcd_dependencies=(self.addons.etcd,) if self.addons.etcd is not None else (),
            monitoring=self.addons.monitoring is not None,
            monitoring_dependencies=(self.addons.monitoring.chart,)
            if self.addons.monitoring is not None
            else (),
            model_bucket_name=self.model_bucket.bucket_name,
        )
        return self._with_nodes(target)

    def _with_nodes(self, target: WorkloadTarget) -> WorkloadTarget:
        """``target`` with the Trainium nodes it carries (:class:`WorkloadTarget`'s node fields)."""
        config = self.config
        return dataclasses.replace(
            target,
            instance_type=config.instance_type,
            desired_nodes=config.desired_nodes,
            max_nodes=config.max_nodes,
            trainium_capacity=config.trainium_capacity,
        )

    @property
    def node_role(self) -> iam.IRole:
        """The Trainium nodes' IAM role, whichever ``trainium_capacity`` launches them."""
        return self.trainium.node_role

    def workload_target_in(self, scope: Construct) -> WorkloadTarget:
        """The :class:`WorkloadTarget` for a workload built in ``scope``, in another stack of the
        same environment (or :attr:`workload_target` in this one).

        The cluster (with its kubectl provider) and the repository are imported by attributes,
        and the model bucket's name is read, from :data:`WORKLOAD_OUTPUTS` with
        ``Fn::GetStackOutput``: no CloudFormation export ties the stacks, so either deploys alone
        and no export can be "in use". The consuming stack depends on this one, so everything the
        workload needs exists before it is deployed.
        """
        here, there = Stack.of(self), Stack.of(scope)
        if here is there:
            return self.workload_target
        if here.environment != there.environment:
            # The repository's ARN and URI are built from the consuming stack's account and region.
            raise ConfigError(
                "region",
                there.region,
                f"put the workload's stack in the platform's environment ({here.environment})",
            )
        there.node.add_dependency(here)

        def read(output_id: str) -> str:
            output_name = here.resolve(self.workload_outputs[output_id].logical_id)
            return Fn.get_stack_output(here.stack_name, output_name, here.region)

        cluster = eks.Cluster.from_cluster_attributes(
            scope,
            "PlatformCluster",
            cluster_name=read("WorkloadClusterName"),
            kubectl_provider=eks.KubectlProvider.from_kubectl_provider_attributes(
                scope, "PlatformKubectlProvider", service_token=read("WorkloadKubectlServiceToken")
            ),
        )
        # By name: the ARN and URI are built from the consuming stack's account and region (the
        # platform's), never by splitting an output, which cfn-lint 1.58 cannot type inside Fn::Split.
        repository = ecr.Repository.from_repository_name(
            scope, "PlatformRepository", read("WorkloadRepositoryName")
        )
        target = WorkloadTarget(
            cluster=cluster,
            repository=repository,
            namespace=self.storage_volume.namespace,
            claim_name=self.storage_volume.claim_name,
            queue_name=self.addons.queue_name,
            etcd_endpoint=self.addons.etcd_endpoint,
            monitoring=self.addons.monitoring is not None,
            model_bucket_name=read(BUCKET_NAME_OUTPUT),
        )
        return self._with_nodes(target)
