"""Launch template for Trainium nodes: every EFA interface, a cluster placement group, IMDSv2.

The rules of its props live here as ``check_*`` functions: the construct runs them, and the
app's configuration (:mod:`trainium_eks.config`) calls the same ones.
"""

from __future__ import annotations

import base64
import re
from typing import Any

from aws_cdk import Tags, Token
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from trainium_job import checks
from trainium_job.errors import ConfigError
from trainium_job.instances import InstanceFacts
from trainium_job.naming import DEFAULT_NAME_PREFIX, launch_template_name, node_name

from ..arguments import require_vpc

#: EFA interface layouts (see :func:`efa_network_interfaces`).
EFA_LAYOUTS = ("efa", "efa-only")
#: Root volume sizes (GiB) the template accepts: container images take ~10 GiB each, and a gp3
#: volume holds at most 16,384 GiB (Amazon EBS volume types).
MIN_ROOT_VOLUME_GIB, MAX_ROOT_VOLUME_GIB = 30, 16384
#: IMDS response hop limits: 1 keeps containers outside the host network from reaching IMDS, 2
#: lets them (what the AMI defaults to).
IMDS_HOP_LIMITS = (1, 2)
#: The root volume of a Trainium node: the AL2023 AMIs' root device, encrypted gp3.
ROOT_DEVICE, ROOT_VOLUME_TYPE = "/dev/xvda", "gp3"
_CAPACITY_RESERVATION = re.compile(r"^cr-[0-9a-f]{17}$")


def check_efa_layout(layout: str, *, field: str = "efa_layout") -> None:
    """One of :data:`EFA_LAYOUTS`."""
    checks.one_of(field, layout, EFA_LAYOUTS)


def check_root_volume_gib(size: int, *, field: str = "root_volume_gib") -> None:
    """A whole number of GiB from 30 to 16384."""
    if not Token.is_unresolved(size):
        checks.whole_number(field, size, minimum=MIN_ROOT_VOLUME_GIB, maximum=MAX_ROOT_VOLUME_GIB)


def check_capacity_reservation_id(
    reservation_id: str | None, *, field: str = "capacity_reservation_id"
) -> None:
    """None, or an EC2 capacity reservation id (``cr-`` and 17 hex digits)."""
    if reservation_id is None or Token.is_unresolved(reservation_id):
        return
    if not isinstance(reservation_id, str) or not _CAPACITY_RESERVATION.match(reservation_id):
        raise ConfigError(field, reservation_id, "give a reservation id such as 'cr-0123456789abcdef0'")


def check_capacity_block(field: str, value: Any, reservation_id: str | None) -> None:
    """A Capacity Block (asked for by ``field`` = ``value``) is launched into its reservation."""
    if not reservation_id:
        raise ConfigError(field, value, "a Capacity Block needs capacity_reservation_id")


def check_launch_options(
    *, root_volume_gib: int, efa_layout: str, capacity_reservation_id: str | None, capacity_block: bool
) -> None:
    """The checks of the launch options the launch template and the node pool share, under the
    names the constructs take them by."""
    check_root_volume_gib(root_volume_gib)
    check_efa_layout(efa_layout)
    check_capacity_reservation_id(capacity_reservation_id)
    if capacity_block:
        check_capacity_block("capacity_block", True, capacity_reservation_id)


def check_imds_hop_limit(hop_limit: int, *, field: str = "imds_hop_limit") -> None:
    """One of :data:`IMDS_HOP_LIMITS`."""
    if not Token.is_unresolved(hop_limit) and hop_limit not in IMDS_HOP_LIMITS:
        raise ConfigError(field, hop_limit, "use 1 or 2")


def efa_network_interfaces(
    facts: InstanceFacts, security_group_ids: list[str], layout: str = "efa"
) -> list[ec2.CfnLaunchTemplate.NetworkInterfaceProperty]:
    """The launch template's network interfaces for ``facts``' instance type.

    ``efa``: one ``efa`` interface per network card, device index 0 on card 0 and 1 on the others
    (the layout the reference walkthrough and eksctl use). ``efa-only``: an ENA primary interface
    on card 0 / device 0, then ``efa-only`` interfaces on card 0 / device 1 and on device 0 of every
    other card (AWS's recommended layout; EFA-only interfaces take no subnet IPs). Both give one EFA
    device per network card. Every interface carries the node security groups, because with
    explicit interfaces EC2 applies no other groups.
    """
    check_efa_layout(layout)
    if not facts.multi_node:
        return [
            ec2.CfnLaunchTemplate.NetworkInterfaceProperty(
                network_card_index=0,
                device_index=0,
                groups=security_group_ids,
                delete_on_termination=True,
            )
        ]

    def nic(card: int, device: int, kind: str) -> ec2.CfnLaunchTemplate.NetworkInterfaceProperty:
        return ec2.CfnLaunchTemplate.NetworkInterfaceProperty(
            network_card_index=card,
            device_index=device,
            interface_type=kind,
            groups=security_group_ids,
            delete_on_termination=True,
        )

    if layout == "efa":
        return [nic(card, 0 if card == 0 else 1, "efa") for card in facts.network_cards]
    return [nic(0, 0, "interface"), nic(0, 1, "efa-only")] + [
        nic(card, 0, "efa-only") for card in facts.network_cards if card > 0
    ]


#: nodeadm's NodeConfig (the EKS AL2023 AMI's node initializer) as EKS merges it from a launch
#: template's MIME user data (``Content-Type: application/node.eks.aws``; awslabs/amazon-eks-ami
#: nodeadm/doc/examples.md). ``FastImagePull`` (nodeadm/api/v1alpha1/nodeconfig_types.go L159-170,
#: default false: nodeadm/internal/api/featuregates.go L18-22) switches containerd to the SOCI
#: snapshotter's parallel pull mode, which the AL2023 AMIs, Neuron included, install
#: (templates/al2023/provisioners/install-worker.sh L217-221): layers fetched in parallel chunks and
#: unpacked in parallel, for any image (no SOCI index needed). In the AMIs since v20250821 (named
#: AggressiveImagePull in v20250813), with the sandbox-image fix for containerd 2.2.3 from v20260512;
#: documented as experimental ("Enabling fast image pull", examples.md L153-173).
_NODECONFIG_BOUNDARY = "//trainium-eks//"


def node_user_data(*, fast_image_pull: bool) -> str | None:
    """The launch template's user data: a MIME document with one NodeConfig part, or None."""
    if not fast_image_pull:
        return None
    lines = [
        "MIME-Version: 1.0",
        f'Content-Type: multipart/mixed; boundary="{_NODECONFIG_BOUNDARY}"',
        "",
        f"--{_NODECONFIG_BOUNDARY}",
        "Content-Type: application/node.eks.aws",
        "",
        "---",
        "apiVersion: node.eks.aws/v1alpha1",
        "kind: NodeConfig",
        "spec:",
        "  featureGates:",
        "    FastImagePull: true",
        "",
        f"--{_NODECONFIG_BOUNDARY}--",
        "",
    ]
    return "\n".join(lines)


class TrainiumLaunchTemplate(Construct):
    """EC2 launch template for the Trainium managed nodegroup.

    Holds the instance type (so the nodegroup carries no instance types, which lets it use the
    Neuron AMI type), all EFA interfaces, a cluster placement group, IMDSv2 only, an encrypted gp3
    root volume, no SSH key, and optional capacity reservation / Capacity Block targeting.

    Attributes:
        launch_template: the L1 launch template.
        efa_security_group: group that allows all traffic to and from itself (EFA needs it).
        placement_group: the cluster placement group (one AZ).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        facts: InstanceFacts,
        vpc: ec2.IVpc,
        cluster_security_group_id: str,
        root_volume_gib: int = 512,
        efa_layout: str = "efa",
        capacity_reservation_id: str | None = None,
        capacity_block: bool = False,
        imds_hop_limit: int = 1,
        name_prefix: str = DEFAULT_NAME_PREFIX,
        fast_image_pull: bool = True,
    ) -> None:
        """
        Args:
            facts: the Trainium instance type's facts row.
            vpc: the VPC of the EFA security group.
            cluster_security_group_id: the EKS cluster security group (put on every interface).
            root_volume_gib: encrypted gp3 root volume, 30 to 16384 GiB. Default 512.
            efa_layout: ``efa`` (an EFA interface per card) or ``efa-only`` (ENA primary plus
                EFA-only interfaces), see :func:`efa_network_interfaces`. Default "efa".
            capacity_reservation_id: capacity reservation or Capacity Block to launch into
                (``cr-`` + 17 hex). Default None: none.
            capacity_block: launch as an ML Capacity Block (needs ``capacity_reservation_id``).
                Default False: on demand.
            imds_hop_limit: IMDSv2 response hop limit, 1 or 2. Default 1: pods outside the host
                network cannot reach IMDS.
            name_prefix: prefix of the instances' and the template's ``Name`` tags. Default
                ``DEFAULT_NAME_PREFIX`` ("trn-bert").
            fast_image_pull: nodeadm's ``FastImagePull`` (containerd pulls layers in parallel
                chunks: :func:`node_user_data`). Default True: a Trainium node pulls the
                multi-GB training image at every job start.
        """
        super().__init__(scope, id)
        vpc = require_vpc(vpc)
        check_launch_options(
            root_volume_gib=root_volume_gib,
            efa_layout=efa_layout,
            capacity_reservation_id=capacity_reservation_id,
            capacity_block=capacity_block,
        )
        check_imds_hop_limit(imds_hop_limit)

        self.efa_security_group = efa_security_group(self, "EfaSecurityGroup", vpc)
        self.placement_group = ec2.PlacementGroup(
            self, "PlacementGroup", strategy=ec2.PlacementGroupStrategy.CLUSTER
        )
        data = ec2.CfnLaunchTemplate.LaunchTemplateDataProperty(
            instance_type=facts.name,
            network_interfaces=efa_network_interfaces(
                facts, [cluster_security_group_id, self.efa_security_group.security_group_id], efa_layout
            ),
            placement=ec2.CfnLaunchTemplate.PlacementProperty(
                group_name=self.placement_group.placement_group_name
            ),
            metadata_options=_imds_v2(imds_hop_limit),
            block_device_mappings=[_root_volume(root_volume_gib)],
            user_data=_base64(node_user_data(fast_image_pull=fast_image_pull)),
            capacity_reservation_specification=_reservation(capacity_reservation_id),
            instance_market_options=(
                ec2.CfnLaunchTemplate.InstanceMarketOptionsProperty(market_type="capacity-block")
                if capacity_block
                else None
            ),
            tag_specifications=[_name_tag(node_name(name_prefix, facts.name))],
        )
        self.launch_template = ec2.CfnLaunchTemplate(self, "LaunchTemplate", launch_template_data=data)
        Tags.of(self.launch_template).add("Name", launch_template_name(name_prefix))


def efa_security_group(scope: Construct, id: str, vpc: ec2.IVpc) -> ec2.SecurityGroup:
    """A group that allows all traffic to and from itself, and nothing else (EFA needs it)."""
    group = ec2.SecurityGroup(
        scope,
        id,
        vpc=vpc,
        description="EFA: all traffic between Trainium nodes (OS-bypass needs it)",
        allow_all_outbound=False,
    )
    group.add_ingress_rule(group, ec2.Port.all_traffic(), "EFA from Trainium nodes")
    group.add_egress_rule(group, ec2.Port.all_traffic(), "EFA to Trainium nodes")
    return group


def _imds_v2(hop_limit: int) -> ec2.CfnLaunchTemplate.MetadataOptionsProperty:
    """IMDSv2 only. Hop limit 1 keeps containers outside the host network from reaching IMDS (and
    the node role's credentials); pods get AWS access from EKS Pod Identity, and the daemons that
    need IMDS (VPC CNI, Pod Identity agent) use the host network."""
    return ec2.CfnLaunchTemplate.MetadataOptionsProperty(
        http_tokens="required",
        http_endpoint="enabled",
        http_put_response_hop_limit=hop_limit,
    )


def _name_tag(name: str) -> ec2.CfnLaunchTemplate.TagSpecificationProperty:
    """The instances' ``Name`` tag."""
    return ec2.CfnLaunchTemplate.TagSpecificationProperty(
        resource_type="instance", tags=[{"key": "Name", "value": name}]
    )


def _base64(text: str | None) -> str | None:
    return None if text is None else base64.b64encode(text.encode()).decode()


def _root_volume(size_gib: int) -> ec2.CfnLaunchTemplate.BlockDeviceMappingProperty:
    """The encrypted gp3 root volume, deleted with its instance."""
    return ec2.CfnLaunchTemplate.BlockDeviceMappingProperty(
        device_name=ROOT_DEVICE,
        ebs=ec2.CfnLaunchTemplate.EbsProperty(
            volume_size=size_gib,
            volume_type=ROOT_VOLUME_TYPE,
            encrypted=True,
            delete_on_termination=True,
        ),
    )


def _reservation(
    reservation_id: str | None,
) -> ec2.CfnLaunchTemplate.CapacityReservationSpecificationProperty | None:
    """Targeting of ``reservation_id``, or None for open capacity."""
    if not reservation_id:
        return None
    return ec2.CfnLaunchTemplate.CapacityReservationSpecificationProperty(
        capacity_reservation_target=ec2.CfnLaunchTemplate.CapacityReservationTargetProperty(
            capacity_reservation_id=reservation_id
        )
    )
