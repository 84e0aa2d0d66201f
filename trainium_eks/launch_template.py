"""Launch template for Trainium nodes: every EFA interface, a cluster placement group, IMDSv2."""

from __future__ import annotations

from aws_cdk import Tags
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from trainium_job.errors import ConfigError
from trainium_job.instances import InstanceFacts


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
    if layout == "efa-only":
        return [nic(0, 0, "interface"), nic(0, 1, "efa-only")] + [
            nic(card, 0, "efa-only") for card in facts.network_cards if card > 0
        ]
    raise ConfigError("efa_layout", layout, "use 'efa' or 'efa-only'")


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
        name_prefix: str = "trn",
    ) -> None:
        super().__init__(scope, id)
        if capacity_block and not capacity_reservation_id:
            raise ConfigError("capacity_block", True, "a Capacity Block needs capacity_reservation_id")
        if imds_hop_limit not in (1, 2):
            raise ConfigError("imds_hop_limit", imds_hop_limit, "use 1 or 2")

        self.efa_security_group = ec2.SecurityGroup(
            self,
            "EfaSecurityGroup",
            vpc=vpc,
            description="EFA: all traffic between Trainium nodes (OS-bypass needs it)",
            allow_all_outbound=False,
        )
        self.efa_security_group.add_ingress_rule(
            self.efa_security_group, ec2.Port.all_traffic(), "EFA from Trainium nodes"
        )
        self.efa_security_group.add_egress_rule(
            self.efa_security_group, ec2.Port.all_traffic(), "EFA to Trainium nodes"
        )
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
            # IMDSv2 only. Hop limit 1 keeps containers outside the host network from reaching
            # IMDS (and the node role's credentials); pods get AWS access from EKS Pod Identity,
            # and the daemons that need IMDS (VPC CNI, Pod Identity agent) use the host network.
            metadata_options=ec2.CfnLaunchTemplate.MetadataOptionsProperty(
                http_tokens="required",
                http_endpoint="enabled",
                http_put_response_hop_limit=imds_hop_limit,
            ),
            block_device_mappings=[
                ec2.CfnLaunchTemplate.BlockDeviceMappingProperty(
                    device_name="/dev/xvda",
                    ebs=ec2.CfnLaunchTemplate.EbsProperty(
                        volume_size=root_volume_gib,
                        volume_type="gp3",
                        encrypted=True,
                        delete_on_termination=True,
                    ),
                )
            ],
            capacity_reservation_specification=(
                ec2.CfnLaunchTemplate.CapacityReservationSpecificationProperty(
                    capacity_reservation_target=ec2.CfnLaunchTemplate.CapacityReservationTargetProperty(
                        capacity_reservation_id=capacity_reservation_id
                    )
                )
                if capacity_reservation_id
                else None
            ),
            instance_market_options=(
                ec2.CfnLaunchTemplate.InstanceMarketOptionsProperty(market_type="capacity-block")
                if capacity_block
                else None
            ),
            tag_specifications=[
                ec2.CfnLaunchTemplate.TagSpecificationProperty(
                    resource_type="instance",
                    tags=[{"key": "Name", "value": f"{name_prefix}-{facts.name}"}],
                )
            ],
        )
        self.launch_template = ec2.CfnLaunchTemplate(self, "LaunchTemplate", launch_template_data=data)
        Tags.of(self.launch_template).add("Name", f"{name_prefix}-trainium")
