"""The Trainium managed nodegroup: Neuron AMI, launch template with EFA, one AZ, tainted.

The rules of its sizes live here as ``check_*`` functions: the construct runs them, and the
app's configuration (:mod:`trainium_eks.config`) calls the same ones with its own key names.
"""

from __future__ import annotations

import re

from aws_cdk import Annotations, Stack, Token
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from trainium_job import checks
from trainium_job.errors import ConfigError
from trainium_job.instances import INSTANCE_FACTS, InstanceFacts, az_offering_problem, region_offering_problem
from trainium_job.neuron_stack import NEURON_STACK
from trainium_job.node_health import PENDING_TAINT
from trainium_job.scheduling import NEURON_TAINT, TRAINIUM_NODE_LABEL

from ..arguments import AnyCluster, kubernetes_version_of, require_cluster
from ..cluster.eks_cluster import node_role
from ..nag import NODE_ROLE_ACKNOWLEDGEMENTS, acknowledge_own_findings
from ..versions import default_neuron_ami_release, neuron_ami_release
from .health_checks import warn_unlifted_taint
from .launch_template import TrainiumLaunchTemplate
from .node_options import TrainiumNodeOptions

__all__ = [
    "RELEASE_VERSION",
    "SIZE_PROPS",
    "TrainiumNodegroup",
    "check_multi_node",
    "check_node_sizes",
    "check_release_version",
]

#: The construct's names of the minimum, desired and maximum size (what its errors name).
SIZE_PROPS = ("min_size", "desired_size", "max_size")
#: An EKS AMI ``releaseVersion``: ``<Kubernetes major.minor.patch>-<build date>``.
RELEASE_VERSION = re.compile(r"^(1\.[0-9]+)\.[0-9]+-[0-9]{8}$")


def check_release_version(
    release_version: str | None, *, kubernetes_version: str | None = None, field: str = "release_version"
) -> None:
    """An EKS Neuron AMI release of ``kubernetes_version`` (when given) whose Neuron driver, when
    the release is in ``NEURON_AMI_RELEASES``, runs the training image's Neuron runtime."""
    if release_version is None or Token.is_unresolved(release_version):
        return
    match = RELEASE_VERSION.match(release_version) if isinstance(release_version, str) else None
    if match is None:
        raise ConfigError(field, release_version, "give an EKS AMI release version such as 1.36.2-20260625")
    if kubernetes_version is not None and match.group(1) != kubernetes_version:
        raise ConfigError(
            field,
            release_version,
            f"is a Kubernetes {match.group(1)} release; the cluster runs {kubernetes_version}: use e.g. "
            f"{default_neuron_ami_release(kubernetes_version)}",
        )
    release = neuron_ami_release(release_version)
    if release is not None and not NEURON_STACK.supports_driver(release.neuron_driver):
        default = default_neuron_ami_release(match.group(1))
        raise ConfigError(
            field,
            release_version,
            f"its Neuron driver {release.neuron_driver} does not run the training image's Neuron runtime "
            f"{NEURON_STACK.runtime_lib} (needs a driver {NEURON_STACK.driver_range}, "
            f"trainium_job/neuron_stack.py): use {default} or another release of NEURON_AMI_RELEASES "
            "with such a driver",
        )


def check_node_sizes(
    min_size: int, desired_size: int, max_size: int, *, names: tuple[str, str, str] = SIZE_PROPS
) -> None:
    """Whole numbers with ``0 <= min <= desired <= max`` and ``max >= 1``; ``names`` are the
    names the caller knows the three sizes by."""
    sizes = (min_size, desired_size, max_size)
    if any(Token.is_unresolved(size) for size in sizes):
        return
    for name, size in zip(names, sizes, strict=True):
        checks.whole_number(name, size)
    min_name, desired_name, max_name = names
    if max_size < 1:
        raise ConfigError(max_name, max_size, "must be at least 1")
    if min_size < 0:
        raise ConfigError(min_name, min_size, "must be 0 or more")
    if min_size > max_size:
        raise ConfigError(min_name, min_size, f"must not exceed {max_name} ({max_size})")
    if not min_size <= desired_size <= max_size:
        raise ConfigError(
            desired_name,
            desired_size,
            f"must lie between {min_name} ({min_size}) and {max_name} ({max_size})",
        )


def check_multi_node(facts: InstanceFacts, max_size: int, *, field: str = "max_size") -> None:
    """More than one node only of an instance type with EFA (collectives span nodes over it)."""
    if not Token.is_unresolved(max_size) and max_size > 1 and not facts.multi_node:
        multi_node = " / ".join(name for name, row in INSTANCE_FACTS.items() if row.multi_node)
        raise ConfigError(
            field,
            max_size,
            f"{facts.name} has no EFA for multi-node training; use 1 node or {multi_node}",
        )


def check_offering(scope: Construct, facts: InstanceFacts, *, az_id: str | None = None) -> None:
    """The stack's region offers Trainium (:data:`~trainium_job.instances.TRAINIUM_OFFERINGS`),
    refused otherwise; an AZ ID the table does not list for the type is a synth warning (the
    doctor's live check decides). Skipped for an environment-agnostic stack."""
    region = Stack.of(scope).region
    if Token.is_unresolved(region):
        return
    problem = region_offering_problem(region)
    if problem:
        raise ConfigError("region", region, f"{facts.name} nodes in a stack of {region}: {problem}")
    azs = az_offering_problem(facts.name, region, az_id) if az_id and not Token.is_unresolved(az_id) else None
    if azs:
        Annotations.of(scope).add_warning_v2("trainium-eks:az-offering", f"az_id={az_id}: {azs}")


def resolve_release_version(
    cluster: eks.ICluster, release_version: str | None, kubernetes_version: str | None
) -> str:
    """The EKS Neuron AMI release a Trainium construct pins: ``release_version``, checked against
    the cluster's Kubernetes version where known, or the tested default of that version."""
    known = kubernetes_version or kubernetes_version_of(cluster)
    if release_version is None:
        if known is None:
            raise ConfigError(
                "release_version",
                None,
                "the cluster's Kubernetes version is not known here (an imported cluster): give "
                "kubernetes_version (e.g. '1.35') or release_version (e.g. "
                f"{default_neuron_ami_release('1.35')!r}); EKS's newest Neuron AMI is never the "
                "default, its driver may not run the training image's runtime",
            )
        try:
            return default_neuron_ami_release(known)
        except KeyError as err:
            raise ConfigError("kubernetes_version", known, f"{err.args[0]}; give release_version") from None
    check_release_version(release_version, kubernetes_version=known)
    return release_version


class TrainiumNodegroup(Construct):
    """Trainium nodes for training: ``options`` (:class:`TrainiumNodeOptions`) say which and how.

    Built with ``eks.Nodegroup`` rather than ``Cluster.add_nodegroup_capacity`` (which applies a
    bundled, stale Neuron device-plugin manifest for Trainium types). The instance type lives in the
    launch template, so the nodegroup lists none and can use the ``AL2023_x86_64_NEURON`` AMI type
    (the L2 rejects that AMI type next to trn1 instance types). Node auto-repair is on.

    Attributes:
        nodegroup: the managed nodegroup.
        node_role: the nodes' IAM role (as :class:`TrainiumNodePool`'s ``node_role``).
        release_version: the EKS Neuron AMI release the nodes run.
        launch_template: the :class:`TrainiumLaunchTemplate` (EFA group, placement group).
        facts: the instance-type facts row.
        subnet: the single subnet the nodes live in.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: AnyCluster,
        options: TrainiumNodeOptions,
        min_size: int = 2,
        desired_size: int = 2,
        max_size: int = 2,
    ) -> None:
        """
        Args:
            cluster: the ``aws_eks_v2`` cluster (its VPC and cluster security group are used).
            options: the nodes' instance type, subnet, AMI release and launch settings (each
                documented with its default on :class:`TrainiumNodeOptions`).
            min_size: minimum nodes. Default 2.
            desired_size: nodes at creation, between ``min_size`` and ``max_size``. Default 2.
            max_size: maximum nodes, at least 1; more than 1 needs an instance type with EFA.
                Default 2.
        """
        super().__init__(scope, id)
        cluster = require_cluster(cluster)
        facts = options.facts
        check_node_sizes(min_size, desired_size, max_size)
        check_multi_node(facts, max_size)
        check_offering(self, facts)
        if options.health_check:
            warn_unlifted_taint(self)
        self.release_version = resolve_release_version(
            cluster, options.release_version, options.kubernetes_version
        )
        self.facts = facts
        self.subnet = options.subnet
        self.launch_template = TrainiumLaunchTemplate(
            self,
            "LaunchTemplate",
            facts=facts,
            vpc=cluster.vpc,
            cluster_security_group_id=cluster.cluster_security_group_id,
            root_volume_gib=options.root_volume_gib,
            efa_layout=options.efa_layout,
            fast_image_pull=options.fast_image_pull,
            capacity_reservation_id=options.capacity_reservation_id,
            capacity_block=options.capacity_block,
            name_prefix=options.name_prefix,
        )
        lt = self.launch_template.launch_template
        self.node_role = node_role(self, "NodeRole")
        self.nodegroup = eks.Nodegroup(
            self,
            "Nodegroup",
            cluster=cluster,
            ami_type=eks.NodegroupAmiType.AL2023_X86_64_NEURON,
            capacity_type=(
                eks.CapacityType.CAPACITY_BLOCK if options.capacity_block else eks.CapacityType.ON_DEMAND
            ),
            launch_template_spec=eks.LaunchTemplateSpec(id=lt.ref, version=lt.attr_latest_version_number),
            node_role=self.node_role,
            subnets=ec2.SubnetSelection(subnets=[options.subnet]),
            min_size=min_size,
            desired_size=desired_size,
            max_size=max_size,
            labels=dict(TRAINIUM_NODE_LABEL),
            taints=[
                eks.TaintSpec(key=t["key"], value=t["value"], effect=eks.TaintEffect.NO_SCHEDULE)
                for t in (NEURON_TAINT, *([PENDING_TAINT] if options.health_check else []))
            ],
            enable_node_auto_repair=True,
            release_version=self.release_version,
        )
        acknowledge_own_findings(self, NODE_ROLE_ACKNOWLEDGEMENTS)

    @property
    def capacity(self) -> eks.Nodegroup:
        """What the Trainium nodes' daemons are applied after: the nodegroup."""
        return self.nodegroup
