"""Trainium nodes launched per job: a Karpenter NodePool and EC2NodeClass that give each node what
the managed nodegroup's launch template gives it.

The same facts build both: the pinned EKS Neuron AMI release (as Karpenter's ``al2023@v<date>``
alias, which picks the Neuron variant for Trainium types), the EFA interfaces (the ``efa`` layout
is what Karpenter attaches by itself when a pod requests ``vpc.amazonaws.com/efa``; ``efa-only``
is written out), the cluster placement group, IMDSv2 with hop limit 1, the encrypted gp3 root
volume, the nodeadm user data, the taint and the labels. ``tests/contracts/test_karpenter.py``
compares the two node by node.

A node goes when no training pod has run on it for ``idle_minutes`` (``WhenEmpty``); while one runs,
its ``karpenter.sh/do-not-disrupt`` annotation and a zero budget for drift keep it. A Capacity
Block's node is drained 40 minutes before the block ends (Karpenter's expiration controller), with
:data:`TERMINATION_GRACE` for the training's SIGTERM checkpoint before EC2 reclaims it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aws_cdk import Token
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from trainium_job import checks
from trainium_job.errors import ConfigError
from trainium_job.instances import InstanceFacts
from trainium_job.naming import node_name
from trainium_job.node_facts import network_facts
from trainium_job.node_health import PENDING_TAINT
from trainium_job.scheduling import (
    DATASET_NODE_LABEL,
    DATASET_TAINT,
    INSTANCE_TYPE_LABEL,
    NEURON_TAINT,
    PREPARATION_NODE_LABEL,
    SYSTEM_NODE_LABEL,
    TRAINIUM_NODE_LABEL,
)
from trainium_job.stop_budget import termination_grace_period_s

from ..arguments import AnyCluster, check_subnet_az, require_cluster
from ..cluster.eks_cluster import check_system_nodes, node_role
from ..cluster.system_nodes import check_node_selector, refuse_auto_mode, require_system_capacity
from ..nag import NODE_ROLE_ACKNOWLEDGEMENTS, acknowledge_own_findings
from ..versions import DATASET_NODE_INSTANCE_TYPE, PREPARATION_NODES
from .gang_wait import gang_wait_floor
from .health_checks import warn_unlifted_taint
from .karpenter import KarpenterController, LaunchResources
from .launch_template import (
    ROOT_DEVICE,
    ROOT_VOLUME_TYPE,
    efa_security_group,
    node_user_data,
)
from .node_options import TrainiumNodeOptions
from .nodegroup import RELEASE_VERSION, check_multi_node, check_offering, resolve_release_version

__all__ = [
    "MIN_IDLE_MINUTES",
    "NODE_POOL_NAME",
    "TERMINATION_GRACE",
    "TRAINIUM_CAPACITY_MODES",
    "TrainiumNodePool",
    "ami_alias",
    "check_karpenter_bounds",
    "ec2_node_class",
    "karpenter_warnings",
    "node_pool",
]

#: ``trainium_capacity`` values: a fixed managed nodegroup, or nodes Karpenter launches per job.
TRAINIUM_CAPACITY_MODES = ("nodegroup", "karpenter")
#: Name of the NodePool and of its EC2NodeClass (cluster-scoped objects).
NODE_POOL_NAME = "trainium"
#: Name of the NodePool and EC2NodeClass of the dataset staging node.
DATASET_POOL_NAME = "dataset"
#: Name of the NodePool and EC2NodeClass of the dataset preparation nodes.
PREPARATION_POOL_NAME = "preparation"
#: The staging and preparation nodes' root volume (GiB): the training image they run is ~20 GB
#: (image_build.py).
DATASET_ROOT_VOLUME_GIB = 100
#: Minutes an empty staging or preparation node is kept: a retried pod comes back within seconds.
DATASET_IDLE_MINUTES = 1
#: API groups and versions of the two objects (Karpenter v1).
NODE_POOL_API = "karpenter.sh/v1"
NODE_CLASS_API = "karpenter.k8s.aws/v1"
#: Karpenter's well-known requirement keys (pkg/apis/v1/labels.go at v1.14.1).
ZONE_ID_LABEL = "topology.k8s.aws/zone-id"
CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"
#: The AWS provider's instance requirement keys (aws/karpenter-provider-aws v1.14.1
#: pkg/apis/v1/labels.go L41, L45, L150, L154: well-known labels, so a NodePool may narrow them and
#: Karpenter picks among the types that match): the family, and the vCPUs, compared as an integer
#: with ``Lte`` (kubernetes-sigs/karpenter v1.14.1 pkg/apis/crds/karpenter.sh_nodepools.yaml
#: L304-342, pkg/scheduling/requirement.go L101-106).
INSTANCE_FAMILY_LABEL = "karpenter.k8s.aws/instance-family"
INSTANCE_CPU_LABEL = "karpenter.k8s.aws/instance-cpu"
#: How long a draining node may hold pods that carry do-not-disrupt: a Capacity Block's node is
#: drained 40 minutes before the block ends and EC2 starts terminating it 30 minutes before
#: (Karpenter v1.14.1 ec2nodeclass_status.go L238, docs tasks/odcrs.md L88-99); the training pod's
#: own grace (the SIGTERM checkpoint) must fit in it (checked).
TERMINATION_GRACE_MINUTES = 8
TERMINATION_GRACE = f"{TERMINATION_GRACE_MINUTES}m"
#: Minutes before a Capacity Block's end that Karpenter drains its nodes (ec2nodeclass_status.go
#: L238 ``capacityReservationExpirationPeriod``).
CAPACITY_BLOCK_DRAIN_MINUTES = 40
#: Nodes a disruption may take at once, by reason: empty ones all; drifted ones (a changed NodePool
#: or EC2NodeClass) never while in use: they go when empty, and new nodes take the new settings.
DISRUPTION_BUDGETS = ({"nodes": "100%", "reasons": ["Empty"]}, {"nodes": "0", "reasons": ["Drifted"]})

# --- bounds of the karpenter keys (docs/capacity.md, "Bounds") ---------------------------------
#: The shortest idle time accepted. At 0 Karpenter marks an empty node consolidatable as soon as
#: its last pod goes (kubernetes-sigs/karpenter v1.14.1 pkg/controllers/nodeclaim/disruption/
#: consolidation.go L62-80) and removes it on its next pass, every 10 s (disruption/
#: controller.go L71); a gang restarting after a failed pod has no pod for a moment, because
#: Volcano creates the new ones only once every old one is gone (volcano-sh/volcano v1.15.0
#: pkg/controllers/job/state/restarting.go L41-49).
MIN_IDLE_MINUTES = 1
#: Addresses AWS keeps in every subnet: "the first four and the last IPv4 address in each
#: subnet's CIDR block" (Amazon EC2 API Reference, CreateSubnet).
SUBNET_RESERVED_ADDRESSES = 5


def node_addresses(facts: InstanceFacts, efa_layout: str) -> int:
    """The most subnet addresses one Trainium node takes: every IPv4 address of the ENIs the VPC
    CNI may attach for pods (nodeadm's ENIs x addresses per ENI, :mod:`trainium_job.node_facts`),
    and with the ``efa`` layout one more per interface on the other network cards (``efa-only``
    interfaces have no address)."""
    net = network_facts(facts.name)
    others = len(facts.network_cards) - 1 if facts.multi_node and efa_layout == "efa" else 0
    return net.default_enis * net.ipv4_per_eni + others


def nodes_in_subnet(facts: InstanceFacts, efa_layout: str, prefix_length: int) -> int:
    """How many such nodes a subnet of ``prefix_length`` holds at their most."""
    return (2 ** (32 - prefix_length) - SUBNET_RESERVED_ADDRESSES) // node_addresses(facts, efa_layout)


def check_karpenter_bounds(
    *,
    max_nodes: int,
    idle_minutes: int,
    facts: InstanceFacts,
    efa_layout: str,
    subnet_prefix_length: int | None,
    max_field: str = "max_nodes",
    idle_field: str = "idle_minutes",
) -> None:
    """ConfigError for an idle time under :data:`MIN_IDLE_MINUTES`, or for more nodes than the
    Trainium subnet has addresses for (``subnet_prefix_length``: its size, when known at synth)."""
    if Token.is_unresolved(max_nodes) or Token.is_unresolved(idle_minutes):
        return
    if idle_minutes < MIN_IDLE_MINUTES:
        raise ConfigError(
            idle_field,
            idle_minutes,
            f"give at least {MIN_IDLE_MINUTES}: at 0 Karpenter may remove a node the moment its last training "
            "pod is gone, and a gang that restarts after a failed pod has none for a moment (Volcano makes "
            "the new pods once the old ones are gone), so a restart could launch all nodes anew",
        )
    if subnet_prefix_length is None:
        return
    most = nodes_in_subnet(facts, efa_layout, subnet_prefix_length)
    if max_nodes > most:
        raise ConfigError(
            max_field,
            max_nodes,
            f"give at most {most}: the Trainium nodes share one /{subnet_prefix_length} subnet of "
            f"{2 ** (32 - subnet_prefix_length) - SUBNET_RESERVED_ADDRESSES:,} addresses and a {facts.name} can "
            f"take {node_addresses(facts, efa_layout)} (its ENIs for pods, and its EFA interfaces with "
            f"efa_interface_layout={efa_layout}); beyond that, launches fail for want of addresses. For more, "
            "deploy into an existing VPC with a larger subnet (existing_vpc_id)",
        )


def karpenter_warnings(
    *, max_nodes: int, desired_nodes: int, idle_minutes: int, facts: InstanceFacts, health_check: bool
) -> list[str]:
    """Karpenter-mode values that are legal but most likely not meant (printed by the review)."""
    warnings = []
    if health_check and max_nodes > desired_nodes:
        # tests/trainium_eks/nodes/test_health_checks_karpenter.py: the check is overhead of a node still
        # launching or being checked, so a waiting training pod does not fit there.
        warnings.append(
            f"max_nodes={max_nodes} is above the job's {desired_nodes} nodes with trainium_health_check on: "
            f"while new nodes are checked, Karpenter counts the check's {facts.neuron_devices} Neuron devices "
            "against them and launches more nodes for the same training pods, up to max_nodes, which then "
            f"stand empty for trainium_idle_minutes; set max_nodes={desired_nodes} (docs/capacity.md, Bounds)"
        )
    relaunch = gang_wait_floor(facts, health_check=health_check)
    if idle_minutes > relaunch.phases_minutes:
        warnings.append(
            f"trainium_idle_minutes={idle_minutes} keeps each empty {facts.name} longer than a relaunch takes "
            f"({relaunch.explain()}): past that, an idle node costs more node-minutes than the relaunch it saves"
        )
    return warnings


def ami_alias(release_version: str) -> str:
    """Karpenter's AMI alias of an EKS AMI release (``1.35.2-20260625`` -> ``al2023@v20260625``).

    Karpenter resolves it to the SSM parameter of that release's Neuron AMI for the cluster's
    Kubernetes version (pkg/providers/amifamily/al2023.go L40-80 at v1.14.1): the same image the
    nodegroup's ``releaseVersion`` gives.
    """
    match = RELEASE_VERSION.match(release_version)
    if match is None:
        raise ConfigError(
            "trainium_ami_release_version", release_version, "give a release such as 1.35.2-20260625"
        )
    return f"al2023@v{release_version.rsplit('-', 1)[1]}"


def _imds_v2() -> dict[str, Any]:
    """IMDSv2 only, hop limit 1: pods outside the host network cannot reach IMDS (as the launch
    template's ``metadata_options``)."""
    return {
        "httpEndpoint": "enabled",
        "httpProtocolIPv6": "disabled",
        "httpPutResponseHopLimit": 1,
        "httpTokens": "required",
    }


def _root_volume(size_gib: int) -> dict[str, Any]:
    """The encrypted gp3 root volume, deleted with its instance (as the launch template's)."""
    return {
        "deviceName": ROOT_DEVICE,
        "rootVolume": True,
        "ebs": {
            "volumeSize": f"{size_gib}Gi",
            "volumeType": ROOT_VOLUME_TYPE,
            "encrypted": True,
            "deleteOnTermination": True,
        },
    }


def efa_only_interfaces(facts: InstanceFacts) -> list[dict[str, Any]]:
    """``spec.networkInterfaces`` of the ``efa-only`` layout: the launch template's, in Karpenter's
    spelling (an ENA primary, then one ``efa-only`` interface per network card)."""
    return [
        {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
        {"networkCardIndex": 0, "deviceIndex": 1, "interfaceType": "efa-only"},
        *(
            {"networkCardIndex": card, "deviceIndex": 0, "interfaceType": "efa-only"}
            for card in facts.network_cards
            if card > 0
        ),
    ]


def ec2_node_class(
    *,
    facts: InstanceFacts,
    release_version: str,
    instance_profile: str,
    subnet_id: str,
    security_group_ids: list[str],
    placement_group: str,
    root_volume_gib: int,
    efa_layout: str,
    fast_image_pull: bool,
    capacity_reservation_id: str | None,
    name_prefix: str,
) -> dict[str, Any]:
    """The EC2NodeClass: how a Trainium node is launched (the launch template's settings)."""
    spec: dict[str, Any] = {
        "amiSelectorTerms": [{"alias": ami_alias(release_version)}],
        "instanceProfile": instance_profile,
        "subnetSelectorTerms": [{"id": subnet_id}],
        "securityGroupSelectorTerms": [{"id": group} for group in security_group_ids],
        "placementGroupSelector": {"name": placement_group},
        "metadataOptions": _imds_v2(),
        # Replaces Karpenter's default mapping (20 GiB): the same volume as the launch template's.
        "blockDeviceMappings": [_root_volume(root_volume_gib)],
        "tags": {"Name": node_name(name_prefix, facts.name)},
    }
    user_data = node_user_data(fast_image_pull=fast_image_pull)
    if user_data is not None:
        # Karpenter appends its own NodeConfig part after this one (bootstrap/nodeadm.go L49-52).
        spec["userData"] = user_data
    if facts.multi_node and efa_layout == "efa-only":
        spec["networkInterfaces"] = efa_only_interfaces(facts)
    if capacity_reservation_id:
        spec["capacityReservationSelectorTerms"] = [{"id": capacity_reservation_id}]
    return {
        "apiVersion": NODE_CLASS_API,
        "kind": "EC2NodeClass",
        "metadata": {"name": NODE_POOL_NAME},
        "spec": spec,
    }


def node_pool(
    *,
    facts: InstanceFacts,
    az_id: str,
    max_nodes: int,
    idle_minutes: int,
    reserved: bool,
    health_check: bool = False,
) -> dict[str, Any]:
    """The NodePool: which nodes, how many at most, when they go; with ``health_check``, each
    node starts with ``PENDING_TAINT`` as a startup taint, lifted by the node health check."""
    pool: dict[str, Any] = {
        "apiVersion": NODE_POOL_API,
        "kind": "NodePool",
        "metadata": {"name": NODE_POOL_NAME},
        "spec": {
            "template": {
                "metadata": {"labels": dict(TRAINIUM_NODE_LABEL)},
                "spec": {
                    "nodeClassRef": {
                        "group": "karpenter.k8s.aws",
                        "kind": "EC2NodeClass",
                        "name": NODE_POOL_NAME,
                    },
                    "requirements": [
                        {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": [facts.name]},
                        {"key": ZONE_ID_LABEL, "operator": "In", "values": [az_id]},
                        {
                            "key": CAPACITY_TYPE_LABEL,
                            "operator": "In",
                            "values": ["reserved" if reserved else "on-demand"],
                        },
                    ],
                    "taints": [dict(NEURON_TAINT)],
                    # A 20-hour run must not meet the default 720 h expiry's forced replacement.
                    "expireAfter": "Never",
                    "terminationGracePeriod": TERMINATION_GRACE,
                },
            },
            "disruption": {
                "consolidationPolicy": "WhenEmpty",
                "consolidateAfter": f"{idle_minutes}m",
                "budgets": [dict(b) for b in DISRUPTION_BUDGETS],
            },
            # vCPUs bound the pool at max_nodes (every instance type reports CPU).
            "limits": {"cpu": str(max_nodes * facts.vcpus)},
        },
    }
    if health_check:
        # startupTaints: put on the node at registration, "expected to be removed ... by a
        # DaemonSet", and ignored when Karpenter decides whether a pod fits a new node
        # (kubernetes-sigs/karpenter v1.14.1 pkg/apis/v1/nodeclaim.go L32-38): the training pods
        # need not tolerate it to get nodes launched, and cannot land before the check lifts it.
        pool["spec"]["template"]["spec"]["startupTaints"] = [dict(PENDING_TAINT)]
    return pool


def _cpu_node_class(
    *,
    name: str,
    tag: str,
    release_version: str,
    instance_profile: str,
    subnet_id: str,
    security_group_id: str,
) -> dict[str, Any]:
    """An EC2NodeClass of CPU nodes: the Trainium nodes' AMI release (its standard variant, for a
    type without accelerators), subnet and IMDS settings; the cluster group only; an encrypted gp3
    root."""
    return {
        "apiVersion": NODE_CLASS_API,
        "kind": "EC2NodeClass",
        "metadata": {"name": name},
        "spec": {
            "amiSelectorTerms": [{"alias": ami_alias(release_version)}],
            "instanceProfile": instance_profile,
            "subnetSelectorTerms": [{"id": subnet_id}],
            "securityGroupSelectorTerms": [{"id": security_group_id}],
            "metadataOptions": _imds_v2(),
            "blockDeviceMappings": [_root_volume(DATASET_ROOT_VOLUME_GIB)],
            "tags": {"Name": tag},
        },
    }


def dataset_node_class(
    *, release_version: str, instance_profile: str, subnet_id: str, security_group_id: str, name_prefix: str
) -> dict[str, Any]:
    """The EC2NodeClass of the staging node (:func:`_cpu_node_class`)."""
    return _cpu_node_class(
        name=DATASET_POOL_NAME,
        tag=node_name(name_prefix, DATASET_NODE_INSTANCE_TYPE),
        release_version=release_version,
        instance_profile=instance_profile,
        subnet_id=subnet_id,
        security_group_id=security_group_id,
    )


def preparation_node_class(
    *, release_version: str, instance_profile: str, subnet_id: str, security_group_id: str, name_prefix: str
) -> dict[str, Any]:
    """The EC2NodeClass of the preparation nodes (:func:`_cpu_node_class`)."""
    return _cpu_node_class(
        name=PREPARATION_POOL_NAME,
        tag=node_name(name_prefix, PREPARATION_POOL_NAME),
        release_version=release_version,
        instance_profile=instance_profile,
        subnet_id=subnet_id,
        security_group_id=security_group_id,
    )


def _cpu_node_pool(
    *, name: str, labels: Mapping[str, str], types: list[dict[str, Any]], az_id: str, cpu_limit: int
) -> dict[str, Any]:
    """A NodePool of on-demand CPU nodes of the ``types`` requirements in the Trainium AZ (beside
    FSx), tainted so that only dataset pods land there, gone a minute after they end."""
    return {
        "apiVersion": NODE_POOL_API,
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {
                    "nodeClassRef": {
                        "group": "karpenter.k8s.aws",
                        "kind": "EC2NodeClass",
                        "name": name,
                    },
                    "requirements": [
                        *types,
                        {"key": ZONE_ID_LABEL, "operator": "In", "values": [az_id]},
                        {"key": CAPACITY_TYPE_LABEL, "operator": "In", "values": ["on-demand"]},
                    ],
                    "taints": [dict(DATASET_TAINT)],
                },
            },
            "disruption": {
                "consolidationPolicy": "WhenEmpty",
                "consolidateAfter": f"{DATASET_IDLE_MINUTES}m",
                "budgets": [dict(b) for b in DISRUPTION_BUDGETS],
            },
            "limits": {"cpu": str(cpu_limit)},
        },
    }


def dataset_node_pool(*, az_id: str) -> dict[str, Any]:
    """The NodePool of the staging node: one small node (:data:`DATASET_NODE_INSTANCE_TYPE`, 4
    vCPU), and room for a second while the first drains (8 vCPU)."""
    return _cpu_node_pool(
        name=DATASET_POOL_NAME,
        labels=DATASET_NODE_LABEL,
        types=[{"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": [DATASET_NODE_INSTANCE_TYPE]}],
        az_id=az_id,
        cpu_limit=8,
    )


def preparation_node_pool(*, az_id: str) -> dict[str, Any]:
    """The NodePool of the preparation nodes: any size of :data:`PREPARATION_NODES`' family up to
    its largest, at most its ``limit_vcpus`` at once. A pool of its own, apart from the staging
    node's, so that the staging pods keep their one small type and the preparation's size is
    checked against a limit no staging pod takes from: Karpenter packs a pool's pending pods
    together, and phase 2's staging pod, created at deploy, waits until the preparation's shards
    are there, then stages: in one pool it would take room on a large preparation node and keep
    that node (``WhenEmpty``) until it has staged."""
    return _cpu_node_pool(
        name=PREPARATION_POOL_NAME,
        labels=PREPARATION_NODE_LABEL,
        types=[
            {"key": INSTANCE_FAMILY_LABEL, "operator": "In", "values": [PREPARATION_NODES.family]},
            {"key": INSTANCE_CPU_LABEL, "operator": "Lte", "values": [str(PREPARATION_NODES.largest_vcpus)]},
        ],
        az_id=az_id,
        cpu_limit=PREPARATION_NODES.limit_vcpus,
    )


def _prefix_length(subnet: ec2.ISubnet) -> int | None:
    """The subnet's prefix length, when its CIDR is known at synth (a subnet the stack creates)."""
    try:
        cidr = subnet.ipv4_cidr_block
    except Exception:  # an imported subnet given without its CIDR: aws-cdk-lib refuses to guess
        return None
    return None if Token.is_unresolved(cidr) else int(cidr.rsplit("/", 1)[1])


def _check_pool(
    scope: Construct,
    options: TrainiumNodeOptions,
    *,
    az_id: str,
    max_nodes: int,
    idle_minutes: int,
    system_nodes: int,
) -> None:
    """The pool's own checks (the launch options were checked when ``options`` was built)."""
    for field, value, least in (("max_nodes", max_nodes, 1), ("idle_minutes", idle_minutes, 0)):
        if not Token.is_unresolved(value):
            checks.whole_number(field, value, minimum=least)
    check_system_nodes(system_nodes)
    check_subnet_az(options.subnet, az_id, field="az_id")
    check_offering(scope, options.facts, az_id=az_id)
    check_multi_node(options.facts, max_nodes)
    check_karpenter_bounds(
        max_nodes=max_nodes,
        idle_minutes=idle_minutes,
        facts=options.facts,
        efa_layout=options.efa_layout,
        subnet_prefix_length=_prefix_length(options.subnet),
    )
    if termination_grace_period_s() >= TERMINATION_GRACE_MINUTES * 60:
        raise ConfigError(
            "terminationGracePeriod",
            TERMINATION_GRACE,
            f"must exceed the training pod's grace of {termination_grace_period_s()} s",
        )


class TrainiumNodePool(Construct):
    """Trainium nodes that Karpenter launches for a waiting training pod and removes when empty.

    The counterpart of :class:`~trainium_eks.nodes.nodegroup.TrainiumNodegroup` for
    ``trainium_capacity=karpenter``: the same node role policies, EFA security group, cluster
    placement group and node settings (module docstring), plus Karpenter itself, and two NodePools
    of CPU nodes so that dataset work never starts a Trainium node: ``dataset``, one small node for
    staging, and ``preparation``, nodes for the preparation pods (:data:`PREPARATION_NODES`).

    Attributes:
        facts, subnet: as the nodegroup's; az_id: the subnet's AZ ID.
        node_role: the nodes' IAM role (an ``EC2_LINUX`` access entry lets them join).
        efa_security_group: all traffic to and from itself.
        placement_group: the cluster placement group (one AZ).
        karpenter: the :class:`KarpenterController`.
        manifest: the EC2NodeClasses and NodePools; what waits for Trainium capacity waits for it.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: AnyCluster,
        options: TrainiumNodeOptions,
        az_id: str,
        max_nodes: int = 2,
        idle_minutes: int = 10,
        system_nodes: int = 2,
        monitored: bool = False,
        system_node_selector: Mapping[str, str] = SYSTEM_NODE_LABEL,
    ) -> None:
        """
        Args:
            cluster: the EKS cluster (its VPC and cluster security group are used); not in EKS
                Auto Mode, which runs a Karpenter of its own (refused).
            options: the nodes' instance type, subnet, AMI release and launch settings, as
                :class:`TrainiumNodegroup`'s (each documented with its default on
                :class:`TrainiumNodeOptions`).
            az_id: the AZ ID of ``options.subnet``.
            max_nodes: most nodes at once (the NodePool's vCPU limit). Default 2.
            idle_minutes: minutes an empty node is kept. Default 10.
            system_nodes: system nodes (the controller's replicas). Default 2.
            monitored: the platform's Prometheus scrapes Karpenter (see
                :class:`KarpenterController`). Default False.
            system_node_selector: the labels of the nodes Karpenter's controller runs on: some
                untainted nodegroup of ``cluster`` must carry them (checked at synth). Default
                ``SYSTEM_NODE_LABEL`` (the system nodegroup :class:`TrainiumCluster` makes).
        """
        super().__init__(scope, id)
        cluster = require_cluster(cluster)
        selector = self._check(
            cluster,
            options,
            az_id=az_id,
            max_nodes=max_nodes,
            idle_minutes=idle_minutes,
            system_nodes=system_nodes,
            system_node_selector=system_node_selector,
        )
        self.facts = options.facts
        self.subnet = options.subnet
        self.az_id = az_id
        self.node_role, profile = self._node_access(cluster)
        self.efa_security_group = efa_security_group(self, "EfaSecurityGroup", cluster.vpc)
        self.placement_group = ec2.PlacementGroup(
            self, "PlacementGroup", strategy=ec2.PlacementGroupStrategy.CLUSTER
        )
        groups = (cluster.cluster_security_group_id, self.efa_security_group.security_group_id)
        self.karpenter = KarpenterController(
            self,
            "Karpenter",
            cluster=cluster,
            node_role=self.node_role,
            launch=LaunchResources(
                subnet_id=options.subnet.subnet_id,
                security_group_ids=groups,
                placement_group=self.placement_group.placement_group_name,
                instance_profile_arn=profile.attr_arn,
                capacity_reservation_id=options.capacity_reservation_id,
            ),
            system_nodes=system_nodes,
            monitored=monitored,
            system_node_selector=selector,
        )
        manifests = self._manifests(
            options,
            instance_profile=Token.as_string(profile.ref),
            security_group_ids=groups,
            az_id=az_id,
            max_nodes=max_nodes,
            idle_minutes=idle_minutes,
        )
        self.manifest = eks.KubernetesManifest(self, "NodePool", cluster=cluster, manifest=manifests)
        self.manifest.node.add_dependency(self.karpenter.chart)
        acknowledge_own_findings(self, NODE_ROLE_ACKNOWLEDGEMENTS)

    def _node_access(self, cluster: eks.ICluster) -> tuple[iam.Role, iam.CfnInstanceProfile]:
        """The nodes' role, its instance profile, and the ``EC2_LINUX`` access entry they join with."""
        role = node_role(self, "NodeRole")
        profile = iam.CfnInstanceProfile(self, "InstanceProfile", roles=[role.role_name])
        eks.AccessEntry(
            self,
            "NodeAccess",
            cluster=cluster,
            principal=role.role_arn,
            access_entry_type=eks.AccessEntryType.EC2_LINUX,
            access_policies=[],
        )
        return role, profile

    def _check(
        self,
        cluster: eks.ICluster,
        options: TrainiumNodeOptions,
        *,
        az_id: str,
        max_nodes: int,
        idle_minutes: int,
        system_nodes: int,
        system_node_selector: Mapping[str, str],
    ) -> dict[str, str]:
        """The pool's checks, and its AMI release resolved (:attr:`release_version`); the
        selector checked."""
        refuse_auto_mode(cluster, owner="TrainiumNodePool")
        selector = check_node_selector(system_node_selector)
        require_system_capacity(self, cluster, selector, owner="TrainiumNodePool")
        self.release_version = resolve_release_version(
            cluster, options.release_version, options.kubernetes_version
        )
        _check_pool(
            self,
            options,
            az_id=az_id,
            max_nodes=max_nodes,
            idle_minutes=idle_minutes,
            system_nodes=system_nodes,
        )
        if options.health_check:
            warn_unlifted_taint(self)
        ami_alias(self.release_version)
        return selector

    def _manifests(
        self,
        options: TrainiumNodeOptions,
        *,
        instance_profile: str,
        security_group_ids: tuple[str, str],
        az_id: str,
        max_nodes: int,
        idle_minutes: int,
    ) -> list[dict[str, Any]]:
        """The Trainium EC2NodeClass and NodePool, then the staging node's pair and the preparation
        nodes' pair."""
        subnet_id = options.subnet.subnet_id
        node_class = ec2_node_class(
            facts=options.facts,
            release_version=self.release_version,
            instance_profile=instance_profile,
            subnet_id=subnet_id,
            security_group_ids=list(security_group_ids),
            placement_group=self.placement_group.placement_group_name,
            root_volume_gib=options.root_volume_gib,
            efa_layout=options.efa_layout,
            fast_image_pull=options.fast_image_pull,
            capacity_reservation_id=options.capacity_reservation_id,
            name_prefix=options.name_prefix,
        )
        pool = node_pool(
            facts=options.facts,
            az_id=az_id,
            max_nodes=max_nodes,
            idle_minutes=idle_minutes,
            reserved=options.capacity_reservation_id is not None,
            health_check=options.health_check,
        )
        cpu_nodes = {
            "release_version": self.release_version,
            "instance_profile": instance_profile,
            "subnet_id": subnet_id,
            "security_group_id": security_group_ids[0],
            "name_prefix": options.name_prefix,
        }
        return [
            node_class,
            pool,
            dataset_node_class(**cpu_nodes),
            dataset_node_pool(az_id=az_id),
            preparation_node_class(**cpu_nodes),
            preparation_node_pool(az_id=az_id),
        ]

    @property
    def capacity(self) -> eks.KubernetesManifest:
        """What the Trainium nodes' daemons are applied after: the NodePool."""
        return self.manifest
