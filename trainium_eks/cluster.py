"""EKS cluster (aws_eks_v2) with a kubectl provider, access entries and a system nodegroup."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import CfnOutput, CfnResource, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from trainium_job.scheduling import SYSTEM_NODE_LABEL

from .escape_hatch import as_icluster, descendant, l1
from .versions import KUBERNETES_RELEASES, SYSTEM_NODE_INSTANCE_TYPE

__all__ = ["SYSTEM_NODE_LABEL", "TrainiumCluster", "node_role"]


_ALL_LOG_TYPES = [
    eks.ClusterLoggingTypes.API,
    eks.ClusterLoggingTypes.AUDIT,
    eks.ClusterLoggingTypes.AUTHENTICATOR,
    eks.ClusterLoggingTypes.CONTROLLER_MANAGER,
    eks.ClusterLoggingTypes.SCHEDULER,
]


#: AWS managed policies of a node role: the kubelet's and image pulls only
#: (AmazonEC2ContainerRegistryPullOnly: no ECR list/describe, unlike ...ReadOnly). The VPC CNI's
#: permissions sit on its own service account (:class:`TrainiumCluster`'s ``vpc_cni``).
NODE_ROLE_POLICIES = ("AmazonEKSWorkerNodePolicy", "AmazonEC2ContainerRegistryPullOnly")
#: The VPC CNI's service account (EKS user guide, "Configure Amazon VPC CNI plugin to use IRSA":
#: a role of its own for aws-node, then the policy removed from the node role).
VPC_CNI_SERVICE_ACCOUNT = "aws-node"
#: The managed vpc-cni add-on's configuration: the network-policy agent on, so NetworkPolicies
#: (etcd's) are enforced (EKS user guide, "Restrict Pod network traffic with Kubernetes network
#: policies").
VPC_CNI_CONFIGURATION = {"enableNetworkPolicy": "true"}


def node_role(scope: Construct, id: str) -> iam.Role:
    """The IAM role of a managed nodegroup's instances (:data:`NODE_ROLE_POLICIES`)."""
    return iam.Role(
        scope,
        id,
        assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
        managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(p) for p in NODE_ROLE_POLICIES],
    )


class TrainiumCluster(Construct):
    """The EKS control plane and a small system nodegroup.

    Defaults: every control-plane log type on, Kubernetes secrets envelope-encrypted with a
    rotating KMS key, private API endpoint unless ``endpoint_public_cidrs`` lists CIDRs (then
    public restricted to them, plus private), no Auto Mode and no default capacity: Trainium and
    system nodes come from explicit nodegroups.

    Attributes:
        cluster: the ``aws_eks_v2.Cluster``.
        system_nodegroup: two small AL2023 nodes for controllers.
        secrets_key: the KMS key for Kubernetes secrets.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        vpc: ec2.IVpc,
        subnets: Sequence[ec2.ISubnet],
        kubernetes_version: str,
        endpoint_public_cidrs: Sequence[str] = (),
        admin_principal_arns: Sequence[str] = (),
        system_nodes: int = 2,
        system_instance_type: str = SYSTEM_NODE_INSTANCE_TYPE,
    ) -> None:
        super().__init__(scope, id)
        release = KUBERNETES_RELEASES[kubernetes_version]
        self.secrets_key = kms.Key(
            self,
            "SecretsKey",
            enable_key_rotation=True,
            description="EKS envelope encryption of Kubernetes secrets",
        )
        endpoint = (
            eks.EndpointAccess.PUBLIC_AND_PRIVATE.only_from(*endpoint_public_cidrs)
            if endpoint_public_cidrs
            else eks.EndpointAccess.PRIVATE
        )
        selection = [ec2.SubnetSelection(subnets=list(subnets))]
        self.cluster = eks.Cluster(
            self,
            "Cluster",
            version=release.eks_version,
            vpc=vpc,
            vpc_subnets=selection,
            endpoint_access=endpoint,
            cluster_logging=_ALL_LOG_TYPES,
            secrets_encryption_key=self.secrets_key,
            default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
            default_capacity=0,
            # Whoever deploys gets no implicit cluster-admin: admins are the listed access entries.
            # The kubectl provider has its own admin access entry (aws_eks_v2 creates it).
            bootstrap_cluster_creator_admin_permissions=False,
            kubectl_provider_options=eks.KubectlProviderOptions(
                kubectl_layer=release.kubectl_layer(self, "KubectlLayer"),
                private_subnets=list(subnets),
            ),
        )
        # The provider applies manifests and charts with its own access entry: make sure the entry
        # exists before the first apply (aws_eks_v2 adds no such dependency).
        # Only the functions: the access entry itself refers to the handler's role.
        kubectl_access = self.cluster.node.find_child("ClusterAdminRoleAccess")
        for path in (
            "KubectlProvider/Handler/Resource",
            "KubectlProvider/Provider/framework-onEvent/Resource",
        ):
            descendant(self.cluster, path, CfnResource).node.add_dependency(kubectl_access)
        for index, arn in enumerate(admin_principal_arns):
            self.cluster.grant_access(
                f"Admin{index}",
                arn,
                [
                    eks.AccessPolicy.from_access_policy_name(
                        "AmazonEKSClusterAdminPolicy", access_scope_type=eks.AccessScopeType.CLUSTER
                    )
                ],
            )
        CfnOutput(
            self,
            "UpdateKubeconfig",
            value=f"aws eks update-kubeconfig --name {self.cluster.cluster_name} "
            f"--region {Stack.of(self).region}",
            description="Point kubectl at the cluster (needs an admin access entry and endpoint access)",
        )
        # The VPC CNI as a managed add-on before any node: its own role through Pod Identity (so
        # the node role has no EC2 network permissions) and the network-policy agent on. It takes
        # over the self-managed copy EKS bootstraps (OVERWRITE).
        from .addons.managed import managed_addon, pod_identity_role
        from .versions import ADDON_PINS

        self.vpc_cni_role = pod_identity_role(
            self,
            "VpcCniRole",
            managed_policy="AmazonEKS_CNI_Policy",
            description="Amazon VPC CNI (aws-node, EKS Pod Identity)",
        )
        self.vpc_cni = managed_addon(
            self,
            "VpcCni",
            cluster=as_icluster(self.cluster),
            pin=ADDON_PINS["vpc-cni"],
            pod_identity=(VPC_CNI_SERVICE_ACCOUNT, self.vpc_cni_role),
            configuration=dict(VPC_CNI_CONFIGURATION),
        )
        l1(self.vpc_cni, eks.CfnAddon).resolve_conflicts = "OVERWRITE"
        # IMDSv2 with hop limit 1 here too (the AMI default is 2: pods could reach the node role).
        self.system_launch_template = ec2.CfnLaunchTemplate(
            self,
            "SystemLaunchTemplate",
            launch_template_data=ec2.CfnLaunchTemplate.LaunchTemplateDataProperty(
                metadata_options=ec2.CfnLaunchTemplate.MetadataOptionsProperty(
                    http_tokens="required", http_endpoint="enabled", http_put_response_hop_limit=1
                ),
                block_device_mappings=[
                    ec2.CfnLaunchTemplate.BlockDeviceMappingProperty(
                        device_name="/dev/xvda",
                        ebs=ec2.CfnLaunchTemplate.EbsProperty(
                            volume_size=50, volume_type="gp3", encrypted=True, delete_on_termination=True
                        ),
                    )
                ],
            ),
        )
        lt = self.system_launch_template
        self.system_nodegroup = eks.Nodegroup(
            self,
            "SystemNodes",
            cluster=as_icluster(self.cluster),
            ami_type=eks.NodegroupAmiType.AL2023_X86_64_STANDARD,
            instance_types=[ec2.InstanceType(system_instance_type)],
            launch_template_spec=eks.LaunchTemplateSpec(id=lt.ref, version=lt.attr_latest_version_number),
            node_role=node_role(self, "SystemNodeRole"),
            min_size=system_nodes,
            desired_size=system_nodes,
            max_size=system_nodes,
            subnets=ec2.SubnetSelection(subnets=list(subnets)),
            labels=dict(SYSTEM_NODE_LABEL),
            enable_node_auto_repair=True,
        )
        self.system_nodegroup.node.add_dependency(self.vpc_cni)
