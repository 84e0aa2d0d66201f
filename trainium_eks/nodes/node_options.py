"""What a Trainium node is, whichever construct launches it: the options the managed nodegroup
(:class:`~trainium_eks.nodes.nodegroup.TrainiumNodegroup`) and the Karpenter node pool
(:class:`~trainium_eks.nodes.node_pool.TrainiumNodePool`) share, checked once here."""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import aws_ec2 as ec2

from trainium_job.errors import ConfigError
from trainium_job.instances import InstanceFacts
from trainium_job.naming import DEFAULT_NAME_PREFIX

from .launch_template import check_launch_options

__all__ = ["TrainiumNodeOptions"]


@dataclass(frozen=True, kw_only=True)
class TrainiumNodeOptions:
    """The Trainium nodes' instance type, subnet, AMI release and launch settings.

    Building it checks the launch settings (a ``ConfigError`` naming the field); the AMI release
    is checked against the cluster's Kubernetes version by the construct that takes it.
    """

    #: The Trainium instance type's facts row (``trainium_job.instances.instance_facts``). Required.
    facts: InstanceFacts
    #: The one subnet of the nodes (the cluster placement group's AZ). Required.
    subnet: ec2.ISubnet
    #: EKS Neuron AMI release of the nodes (``releaseVersion``, e.g. "1.36.2-20260625", of the
    #: cluster's Kubernetes version); it fixes their Neuron driver (see
    #: ``trainium_eks.versions.NEURON_AMI_RELEASES``). Default None: the tested release of the
    #: cluster's Kubernetes version whose driver runs the training image's runtime
    #: (``default_neuron_ami_release``). EKS's newest is never the default: its driver may not run
    #: that runtime.
    release_version: str | None = None
    #: The cluster's Kubernetes ``major.minor``, to pick or check the release. Default None: read
    #: from the cluster when this app defines it; an imported cluster needs this or
    #: ``release_version``.
    kubernetes_version: str | None = None
    #: Encrypted gp3 root volume per node, 30 to 16384 GiB. Default 512.
    root_volume_gib: int = 512
    #: ``efa`` or ``efa-only`` (see :class:`~trainium_eks.nodes.launch_template.TrainiumLaunchTemplate`).
    #: Default "efa".
    efa_layout: str = "efa"
    #: nodeadm's parallel image pull (see ``node_user_data``). Default True: a Trainium node pulls
    #: the multi-GB training image at every job start.
    fast_image_pull: bool = True
    #: Capacity reservation or Capacity Block to launch into (``cr-`` + 17 hex). Default None: none.
    capacity_reservation_id: str | None = None
    #: The nodes are an ML Capacity Block (needs ``capacity_reservation_id``). Default False: on
    #: demand.
    capacity_block: bool = False
    #: Prefix of the instances' ``Name`` tags. Default ``DEFAULT_NAME_PREFIX`` ("trn-bert").
    name_prefix: str = DEFAULT_NAME_PREFIX
    #: Every node starts with ``PENDING_TAINT`` (trainium_job/node_health.py), which the node health
    #: check's DaemonSet lifts when the node passes (:mod:`trainium_eks.nodes.health_checks`).
    #: Default False: no taint.
    health_check: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.facts, InstanceFacts):
            raise ConfigError(
                "TrainiumNodeOptions.facts",
                self.facts,
                f"give the instance type's facts row, instance_facts({self.facts!r}), not a "
                f"{type(self.facts).__name__}",
            )
        if isinstance(self.subnet, str) or not hasattr(self.subnet, "subnet_id"):
            raise ConfigError(
                "TrainiumNodeOptions.subnet",
                self.subnet if isinstance(self.subnet, str) else type(self.subnet).__name__,
                "give an ec2.ISubnet, not its ID: ec2.Subnet.from_subnet_attributes(scope, 'Trainium', "
                "subnet_id=..., availability_zone=...) or one of your VPC's subnets",
            )
        # Checked once for both constructs; the launch template checks them again for callers
        # that build it alone (same checks, same messages).
        check_launch_options(
            root_volume_gib=self.root_volume_gib,
            efa_layout=self.efa_layout,
            capacity_reservation_id=self.capacity_reservation_id,
            capacity_block=self.capacity_block,
        )
