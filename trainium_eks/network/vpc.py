"""Network: a VPC with public and private subnets in exactly two AZs given by AZ ID.

The rules of its props live here as ``check_*`` functions: the construct runs them, and the
app's configuration (:mod:`trainium_eks.config`) calls the same ones.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence

from aws_cdk import RemovalPolicy, Stack, Token
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct

from trainium_job.errors import ConfigError

from ..arguments import check_subnet_az, require_vpc
from ..escape_hatch import l1

#: Subnets the created VPC holds in EACH of its two AZs, in the order aws-cdk-lib allocates them:
#: (name, prefix length). Private /18s: every EFA interface and every pod (VPC CNI) takes an address.
SUBNET_LAYOUT: tuple[tuple[str, int], ...] = (("public", 24), ("private", 18))
AZ_COUNT = 2
#: NAT gateways of a created VPC: one (cheaper) or one per AZ (survives an AZ outage).
NAT_GATEWAY_COUNTS = (1, AZ_COUNT)
_VPC_ID = re.compile(r"^vpc-[0-9a-f]{8}([0-9a-f]{9})?$")
_SUBNET_ID = re.compile(r"^subnet-[0-9a-f]{8}([0-9a-f]{9})?$")


def subnet_layout_problem(cidr: str) -> str | None:
    """Why :data:`SUBNET_LAYOUT` does not fit in ``cidr`` (None when it fits).

    Mirrors how aws-cdk-lib's ``ec2.Vpc`` carves subnets: each group in order, one block per AZ,
    each block starting at the next address aligned to its own size.
    """
    net = ipaddress.ip_network(cidr, strict=True)
    cursor = int(net.network_address)
    for name, prefix in SUBNET_LAYOUT:
        size = 2 ** (32 - prefix)
        for _ in range(AZ_COUNT):
            cursor = -(-cursor // size) * size
            cursor += size
            if cursor > int(net.broadcast_address) + 1:
                return (
                    f"the {AZ_COUNT} public /{SUBNET_LAYOUT[0][1]} and {AZ_COUNT} private "
                    f"/{SUBNET_LAYOUT[1][1]} subnets do not fit ({name} /{prefix} runs past "
                    f"{net.broadcast_address}); use a /16"
                )
    return None


def check_vpc_cidr(cidr: str, *, created: bool = True, field: str = "cidr") -> None:
    """An IPv4 CIDR of /16 to /28; for a ``created`` VPC, one that holds :data:`SUBNET_LAYOUT`."""
    if Token.is_unresolved(cidr):
        return
    try:
        vpc_net = ipaddress.ip_network(cidr, strict=True)
    except ValueError:
        raise ConfigError(field, cidr, "give an IPv4 CIDR such as '10.0.0.0/16'") from None
    if vpc_net.version != 4:
        raise ConfigError(field, cidr, "the VPC's primary CIDR is IPv4; give one such as '10.0.0.0/16'")
    if not 16 <= vpc_net.prefixlen <= 28:
        raise ConfigError(field, cidr, "VPC CIDRs are /16 to /28 (Amazon VPC quotas); use a /16")
    if created:
        problem = subnet_layout_problem(cidr)
        if problem:
            raise ConfigError(field, cidr, problem)


def check_nat_gateways(count: int, *, field: str = "nat_gateways") -> None:
    """One NAT gateway or one per AZ."""
    if not Token.is_unresolved(count) and count not in NAT_GATEWAY_COUNTS:
        raise ConfigError(field, count, "use 1 or 2")


def check_existing_vpc(
    vpc_id: str | None,
    subnet_ids: Sequence[str],
    *,
    names: tuple[str, str] = ("existing_vpc_id", "existing_private_subnet_ids"),
) -> None:
    """An existing VPC's id with two private subnet ids (the Trainium AZ's first), or neither."""
    vpc_name, subnets_name = names
    if vpc_id is not None:
        if not Token.is_unresolved(vpc_id) and not _VPC_ID.match(vpc_id):
            raise ConfigError(vpc_name, vpc_id, "give a VPC id such as 'vpc-0abc...'")
        if len(subnet_ids) != AZ_COUNT:
            raise ConfigError(
                subnets_name,
                list(subnet_ids),
                "give two private subnet ids: the Trainium AZ's first, then the second AZ's",
            )
    elif subnet_ids:
        raise ConfigError(subnets_name, list(subnet_ids), f"only used together with {vpc_name}")
    for subnet in subnet_ids:
        if not Token.is_unresolved(subnet) and not _SUBNET_ID.match(subnet):
            raise ConfigError(subnets_name, subnet, "give subnet ids such as 'subnet-0abc...'")


class TrainiumNetwork(Construct):
    """The VPC the cluster, the Trainium nodes and FSx live in.

    Either creates a VPC (public + private subnet in each of ``az_ids``, NAT, flow logs, an S3
    gateway endpoint on the private subnets' route tables), wraps
    an existing one (``existing_vpc_id`` + private subnet ids, Trainium-AZ subnet first), or uses a
    VPC object of the app's own (``vpc``, with ``private_subnets`` or its own private subnets).

    Subnets are pinned by **AZ ID** through ``AvailabilityZoneId`` on the subnets: AZ names map to
    different physical zones in each account, and Trainium is offered only in some zones. This
    keeps synth offline (no AZ lookup) and the stack environment-agnostic.

    The S3 gateway endpoint (free: Amazon VPC User Guide, "Gateway endpoints") routes the nodes'
    traffic to S3 in the VPC's region around the NAT gateway and its charge per GB processed:
    ECR's image layers, which a pull downloads from S3 (Amazon ECR User Guide, "Amazon ECR
    interface VPC endpoints", S3 gateway endpoint), and the buckets the jobs read or write there.
    S3 in another region still crosses the NAT (a gateway endpoint serves its own region only:
    Amazon VPC User Guide, "Gateway endpoints for Amazon S3"). An existing VPC or one of the app's
    own gets none: its route tables are its owner's, and a route table takes the S3 prefix-list
    route of one endpoint only.

    ``retain_on_delete`` keeps the created VPC and the Trainium-AZ private subnet when the stack
    is deleted: the FSx file system is retained with its data and its network interfaces live in
    that subnet, so deleting them would fail the whole stack deletion.

    Attributes:
        vpc: the VPC.
        trainium_subnet: private subnet in the Trainium AZ (nodegroup, FSx).
        private_subnets: private subnets, Trainium AZ first (control plane, system nodes).
        s3_endpoint: the S3 gateway endpoint of a created VPC; None for an existing VPC or the
            app's own.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        az_ids: Sequence[str],
        cidr: str = "10.0.0.0/16",
        nat_gateways: int = 1,
        existing_vpc_id: str | None = None,
        existing_private_subnet_ids: Sequence[str] = (),
        retain_on_delete: bool = True,
        vpc: ec2.IVpc | None = None,
        private_subnets: Sequence[ec2.ISubnet] = (),
    ) -> None:
        """
        Args:
            az_ids: two AZ IDs (e.g. ``("usw2-az4", "usw2-az3")``), the Trainium AZ first.
            cidr: IPv4 CIDR of the created VPC, /16 to /28 and large enough for its subnets.
                Default "10.0.0.0/16".
            nat_gateways: NAT gateways of the created VPC, 1 or 2. Default 1.
            existing_vpc_id: use this VPC instead of creating one. Default None: create one.
            existing_private_subnet_ids: with ``existing_vpc_id``, its two private subnet ids,
                the Trainium AZ's first. Default ``()``.
            retain_on_delete: keep the created VPC and the Trainium-AZ subnet when the stack is
                deleted. Default True.
            vpc: a VPC of the app's own to use (not with ``existing_vpc_id``). Default None.
            private_subnets: with ``vpc``, its two private subnets, the Trainium AZ's first (its
                AZ checked against ``az_ids[0]`` as far as synth can tell: its declared AZ ID, or
                its AZ name's region). Default ``()``: the VPC's private subnets in its order,
                which must then be two.
        """
        super().__init__(scope, id)
        if len(az_ids) != AZ_COUNT:
            raise ConfigError("az_ids", list(az_ids), "give exactly two AZ IDs")
        check_existing_vpc(existing_vpc_id, existing_private_subnet_ids)
        if vpc is not None:
            vpc = require_vpc(vpc)
            if existing_vpc_id:
                raise ConfigError("vpc", vpc.vpc_id, "give either vpc or existing_vpc_id, not both")
        elif private_subnets:
            raise ConfigError("private_subnets", len(private_subnets), "only used together with vpc")
        if not existing_vpc_id and vpc is None:
            check_vpc_cidr(cidr)
            check_nat_gateways(nat_gateways)
        self.az_ids = tuple(az_ids)
        self.s3_endpoint: ec2.GatewayVpcEndpoint | None = None
        if vpc is not None:
            self.vpc = vpc
        elif existing_vpc_id:
            self.vpc = ec2.Vpc.from_vpc_attributes(
                self,
                "Vpc",
                vpc_id=existing_vpc_id,
                # Only labels for the imported subnets; placement comes from the subnets themselves.
                availability_zones=list(az_ids),
                private_subnet_ids=list(existing_private_subnet_ids),
            )
        else:
            self.vpc = self._create_vpc(cidr, nat_gateways)
            self.s3_endpoint = self.vpc.add_gateway_endpoint(
                "S3",
                service=ec2.GatewayVpcEndpointAwsService.S3,
                subnets=[ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)],
            )
        self.private_subnets: list[ec2.ISubnet] = list(private_subnets or self.vpc.private_subnets)
        if vpc is not None and len(self.private_subnets) != AZ_COUNT:
            raise ConfigError(
                "private_subnets",
                len(self.private_subnets),
                "give two private subnets of the VPC: the Trainium AZ's first, then the second AZ's",
            )
        self.trainium_subnet: ec2.ISubnet = self.private_subnets[0]
        if vpc is not None:
            check_subnet_az(self.trainium_subnet, self.az_ids[0], field="private_subnets")
        if retain_on_delete and not existing_vpc_id and vpc is None:
            for construct in (self.vpc, self.trainium_subnet):
                l1(construct).apply_removal_policy(RemovalPolicy.RETAIN)

    def _create_vpc(self, cidr: str, nat_gateways: int) -> ec2.Vpc:
        vpc = ec2.Vpc(
            self,
            "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(cidr),
            max_azs=2,
            nat_gateways=nat_gateways,
            subnet_configuration=[
                ec2.SubnetConfiguration(
                    name=name,
                    cidr_mask=prefix,
                    subnet_type=(
                        ec2.SubnetType.PUBLIC if name == "public" else ec2.SubnetType.PRIVATE_WITH_EGRESS
                    ),
                )
                for name, prefix in SUBNET_LAYOUT
            ],
        )
        for subnets in (vpc.public_subnets, vpc.private_subnets):
            for az_id, subnet in zip(self.az_ids, subnets, strict=True):
                cfn = l1(subnet)
                cfn.add_property_deletion_override("AvailabilityZone")
                cfn.add_property_override("AvailabilityZoneId", az_id)
        # Public subnets exist only for the NAT gateways; nothing gets a public address by default.
        for subnet in vpc.public_subnets:
            l1(subnet).add_property_override("MapPublicIpOnLaunch", False)
        # Flow logs name peers and ports: encrypted with a key of their own (kept with the logs).
        key = kms.Key(
            self,
            "FlowLogsKey",
            enable_key_rotation=True,
            removal_policy=RemovalPolicy.RETAIN,
            description="VPC flow logs of the Trainium platform",
        )
        key.grant_encrypt_decrypt(iam.ServicePrincipal(f"logs.{Stack.of(self).region}.amazonaws.com"))
        log_group = logs.LogGroup(
            self,
            "FlowLogs",
            retention=logs.RetentionDays.ONE_YEAR,
            removal_policy=RemovalPolicy.RETAIN,
            encryption_key=key,
        )
        vpc.add_flow_log("FlowLog", destination=ec2.FlowLogDestination.to_cloud_watch_logs(log_group))
        return vpc
