"""EKS cluster (aws_eks_v2) with a kubectl provider, access entries and a system nodegroup.

The rules of the cluster's props live here as ``check_*`` functions: the construct runs them,
and the app's configuration (:mod:`trainium_eks.config`) calls the same ones.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from functools import cache

from aws_cdk import CfnOutput, CfnResource, Stack, Token
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk.region_info import RegionInfo
from constructs import Construct

from trainium_job import checks
from trainium_job.errors import ConfigError
from trainium_job.scheduling import SYSTEM_NODE_LABEL

from ..arguments import require_vpc
from ..escape_hatch import as_icluster, descendant, l1
from ..nag import TRAINIUM_CLUSTER_ACKNOWLEDGEMENTS, acknowledge_cluster_findings, acknowledge_own_findings
from ..versions import KUBERNETES_RELEASES, SYSTEM_NODE_INSTANCE_TYPE, AddonPin, Declared, KubernetesRelease
from .managed_addons import managed_addon, pod_identity_role
from .system_nodes import check_node_selector

__all__ = [
    "MAX_PUBLIC_ENDPOINT_ADDRESSES",
    "TrainiumCluster",
    "check_admin_principal_arns",
    "check_endpoint_public_cidrs",
    "check_kubernetes_version",
    "check_system_nodes",
    "node_role",
    "region_partition",
]


# EKS managed add-ons: EKS refuses a version it does not offer for the cluster's Kubernetes
# version, so each pin lists, per Kubernetes version, where it was seen offered (checked
# 2026-11: public configurations that pin the version next to that Kubernetes version's
# kube-proxy or cluster version; ``aws eks describe-addon-versions --kubernetes-version 1.35
# --addon-name <name>`` re-checks one).
# Amazon VPC CNI: v1.23.1-eksbuild.1 as installed on an EKS 1.36 cluster (inventory of
# 2026-09-24 in a public EKS 1.36 lab's architecture notes). EKS offers one VPC CNI build for
# every supported Kubernetes version at a time (EKS user guide, "Amazon VPC CNI versions":
# v1.20.1-eksbuild.3 for 1.27-1.33; earlier tables likewise), so it serves 1.34 and 1.35 too.
#: The Amazon VPC CNI add-on.
VPC_CNI = AddonPin(
    "vpc-cni",
    "v1.23.1-eksbuild.1",
    compatibility={
        "1.34": Declared(
            True,
            "EKS offers one VPC CNI build for all supported versions (EKS user guide version table; "
            "a 2026 survey found v1.22.3-eksbuild.1 common to 1.30-1.36)",
        ),
        "1.35": Declared(
            True,
            "as for 1.34",
        ),
        "1.36": Declared(
            True,
            "installed on an EKS 1.36 cluster (public inventory, 2026-09-24)",
        ),
    },
    managed=True,
)


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
#: Root volume of each system node (GiB, encrypted gp3): the AL2023 AMI and the controllers' images.
SYSTEM_ROOT_VOLUME_GIB = 50
#: The VPC CNI's service account (EKS user guide, "Configure Amazon VPC CNI plugin to use IRSA":
#: a role of its own for aws-node, then the policy removed from the node role).
VPC_CNI_SERVICE_ACCOUNT = "aws-node"
#: The managed vpc-cni add-on's configuration: the network-policy agent on, so NetworkPolicies
#: (etcd's) are enforced (EKS user guide, "Restrict Pod network traffic with Kubernetes network
#: policies").
VPC_CNI_CONFIGURATION = {"enableNetworkPolicy": "true"}
#: System nodes the construct accepts: a few small nodes run the controllers.
MIN_SYSTEM_NODES, MAX_SYSTEM_NODES = 1, 10
#: Largest share of the IPv4 space the public endpoint may be opened to without the opt-in:
#: 2**24 addresses (one /8, 1/256 of IPv4); an organisation's egress ranges are far smaller.
MAX_PUBLIC_ENDPOINT_ADDRESSES = 2**24
_ROLE_OR_USER_ARN = re.compile(r"^arn:(aws[a-z-]*):iam::[0-9]{12}:(role|user)/[\w+=,.@/-]{1,512}$")


@cache
def region_partition(region: str) -> str | None:
    """The partition of ``region`` from aws-cdk-lib's region facts, or None for an unknown region
    (cached: the facts are a constant of the pinned aws-cdk-lib, read through the jsii kernel)."""
    if region not in _region_names():
        return None
    return RegionInfo.get(region).partition


@cache
def _region_names() -> frozenset[str]:
    return frozenset(r.name for r in RegionInfo.regions)


def check_kubernetes_version(version: str, *, field: str = "kubernetes_version") -> KubernetesRelease:
    """The release of ``version`` (a key of ``KUBERNETES_RELEASES``); ConfigError otherwise."""
    if version not in KUBERNETES_RELEASES:
        raise ConfigError(field, version, f"supported: {', '.join(KUBERNETES_RELEASES)}")
    return KUBERNETES_RELEASES[version]


def check_system_nodes(count: int, *, field: str = "system_nodes") -> None:
    """The system nodegroup's size: a whole number from 1 to 10."""
    if not Token.is_unresolved(count):
        checks.whole_number(field, count, minimum=MIN_SYSTEM_NODES, maximum=MAX_SYSTEM_NODES)


def check_endpoint_public_cidrs(
    cidrs: Sequence[str], *, allow_broad: bool = False, field: str = "endpoint_public_cidrs"
) -> None:
    """Public endpoint CIDRs: IPv4 (the cluster is IPv4), never all addresses, and together at
    most :data:`MAX_PUBLIC_ENDPOINT_ADDRESSES` unless ``allow_broad``."""
    nets = []
    for cidr in cidrs:
        if Token.is_unresolved(cidr):
            continue
        try:
            net = ipaddress.ip_network(cidr, strict=True)
        except ValueError:
            raise ConfigError(field, cidr, "give CIDRs such as '203.0.113.7/32'") from None
        if net.version != 4:
            raise ConfigError(
                field, cidr, "the cluster's endpoint is IPv4; give IPv4 CIDRs such as '203.0.113.7/32'"
            )
        if net.prefixlen == 0:
            raise ConfigError(field, cidr, "an open API endpoint is not allowed; list your own CIDRs")
        nets.append(net)
    covered = sum(n.num_addresses for n in ipaddress.collapse_addresses(nets))
    if covered > MAX_PUBLIC_ENDPOINT_ADDRESSES and not allow_broad:
        raise ConfigError(
            field,
            ",".join(cidrs),
            f"together they open the endpoint to {covered:,} addresses (more than a /8); "
            "list your own ranges, or set endpoint_public_allow_broad=true",
        )


def check_admin_principal_arns(
    arns: Sequence[str], *, region: str | None = None, field: str = "admin_principal_arns"
) -> None:
    """IAM role or user ARNs; with a known ``region``, in its partition."""
    partition = region_partition(region) if region and not Token.is_unresolved(region) else None
    for arn in arns:
        if Token.is_unresolved(arn):
            continue
        match = _ROLE_OR_USER_ARN.match(arn)
        if not match:
            raise ConfigError(
                field,
                arn,
                f"give IAM role or user ARNs such as 'arn:{partition or 'aws'}:iam::123456789012:role/Admin'",
            )
        if partition is not None and match.group(1) != partition:
            raise ConfigError(
                field, arn, f"region {region} is in partition {partition}: use 'arn:{partition}:...'"
            )


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
        system_launch_template: its launch template (IMDSv2, encrypted gp3 root).
        secrets_key: the KMS key for Kubernetes secrets.
        vpc_cni, vpc_cni_role: the managed VPC CNI add-on and its Pod Identity role.
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
        endpoint_public_allow_broad: bool = False,
        admin_principal_arns: Sequence[str] = (),
        system_nodes: int = 2,
        system_instance_type: str = SYSTEM_NODE_INSTANCE_TYPE,
        system_node_selector: Mapping[str, str] = SYSTEM_NODE_LABEL,
    ) -> None:
        """
        Args:
            vpc: the VPC of the cluster.
            subnets: private subnets of the control plane's interfaces, the kubectl provider
                and the system nodes (two AZs).
            kubernetes_version: a key of ``KUBERNETES_RELEASES`` (e.g. "1.35").
            endpoint_public_cidrs: IPv4 CIDRs that may reach a public API endpoint. Default
                ``()``: private endpoint only.
            endpoint_public_allow_broad: accept ``endpoint_public_cidrs`` that together cover more
                than one /8 (:data:`MAX_PUBLIC_ENDPOINT_ADDRESSES`). Default False.
            admin_principal_arns: IAM role or user ARNs given cluster-admin access entries.
                Default ``()``: no admin but the kubectl provider.
            system_nodes: size of the system nodegroup, 1 to 10. Default 2.
            system_instance_type: instance type of the system nodes. Default
                ``SYSTEM_NODE_INSTANCE_TYPE`` ("m7i.large").
            system_node_selector: the labels the system nodes carry, which the add-ons' controllers
                select (give the same to each construct that takes it). Default
                ``SYSTEM_NODE_LABEL`` (``trainium-eks/pool: system``).
        """
        super().__init__(scope, id)
        vpc = require_vpc(vpc)
        release = check_kubernetes_version(kubernetes_version)
        check_endpoint_public_cidrs(endpoint_public_cidrs, allow_broad=endpoint_public_allow_broad)
        check_admin_principal_arns(admin_principal_arns, region=Stack.of(self).region)
        check_system_nodes(system_nodes)
        labels = check_node_selector(system_node_selector)
        self.secrets_key = kms.Key(
            self,
            "SecretsKey",
            enable_key_rotation=True,
            description="EKS envelope encryption of Kubernetes secrets",
        )
        self.cluster = self._cluster(release, vpc, subnets, endpoint_public_cidrs)
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
        self.vpc_cni_role, self.vpc_cni = self._vpc_cni()
        self.system_launch_template = self._system_launch_template()
        self.system_nodegroup = self._system_nodegroup(subnets, system_nodes, system_instance_type, labels)
        acknowledge_cluster_findings(self.cluster)
        acknowledge_own_findings(self, TRAINIUM_CLUSTER_ACKNOWLEDGEMENTS)

    def _cluster(
        self,
        release: KubernetesRelease,
        vpc: ec2.IVpc,
        subnets: Sequence[ec2.ISubnet],
        endpoint_public_cidrs: Sequence[str],
    ) -> eks.Cluster:
        endpoint = (
            eks.EndpointAccess.PUBLIC_AND_PRIVATE.only_from(*endpoint_public_cidrs)
            if endpoint_public_cidrs
            else eks.EndpointAccess.PRIVATE
        )
        cluster = eks.Cluster(
            self,
            "Cluster",
            version=release.eks_version,
            vpc=vpc,
            vpc_subnets=[ec2.SubnetSelection(subnets=list(subnets))],
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
        kubectl_access = cluster.node.find_child("ClusterAdminRoleAccess")
        for path in (
            "KubectlProvider/Handler/Resource",
            "KubectlProvider/Provider/framework-onEvent/Resource",
        ):
            descendant(cluster, path, CfnResource).node.add_dependency(kubectl_access)
        return cluster

    def _vpc_cni(self) -> tuple[iam.Role, eks.Addon]:
        """The VPC CNI as a managed add-on before any node: its own role through Pod Identity (so
        the node role has no EC2 network permissions) and the network-policy agent on. It takes
        over the self-managed copy EKS bootstraps (OVERWRITE)."""
        role = pod_identity_role(
            self,
            "VpcCniRole",
            managed_policy="AmazonEKS_CNI_Policy",
            description="Amazon VPC CNI (aws-node, EKS Pod Identity)",
        )
        addon = managed_addon(
            self,
            "VpcCni",
            cluster=as_icluster(self.cluster),
            pin=VPC_CNI,
            pod_identity=(VPC_CNI_SERVICE_ACCOUNT, role),
            configuration=dict(VPC_CNI_CONFIGURATION),
        )
        l1(addon, eks.CfnAddon).resolve_conflicts = "OVERWRITE"
        return role, addon

    def _system_launch_template(self) -> ec2.CfnLaunchTemplate:
        """IMDSv2 with hop limit 1 here too (the AMI default is 2: pods could reach the node role)."""
        return ec2.CfnLaunchTemplate(
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
                            volume_size=SYSTEM_ROOT_VOLUME_GIB,
                            volume_type="gp3",
                            encrypted=True,
                            delete_on_termination=True,
                        ),
                    )
                ],
            ),
        )

    def _system_nodegroup(
        self,
        subnets: Sequence[ec2.ISubnet],
        system_nodes: int,
        system_instance_type: str,
        labels: Mapping[str, str],
    ) -> eks.Nodegroup:
        lt = self.system_launch_template
        nodegroup = eks.Nodegroup(
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
            labels=dict(labels),
            enable_node_auto_repair=True,
        )
        nodegroup.node.add_dependency(self.vpc_cni)
        return nodegroup
