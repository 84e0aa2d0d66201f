"""Karpenter: launches the Trainium nodes when a training pod waits, removes them when empty.

Installed only with ``trainium_capacity=karpenter`` (:class:`~trainium_eks.nodes.node_pool.TrainiumNodePool`
holds the NodePool and EC2NodeClass). What is here follows Karpenter's own getting-started set-up at
the pinned version (aws/karpenter-provider-aws v1.14.1: ``getting-started-with-karpenter``
``cloudformation.yaml`` for the IAM policy and the interruption queue, ``step08-apply-helm-chart.sh``
for the chart), with these differences, each narrower than the original:

* the controller's credentials come from EKS Pod Identity (what that script's cluster uses);
* the nodes use an instance profile made here, so the controller gets no permission to create,
  tag or delete instance profiles (``spec.instanceProfile``: Karpenter does not manage it), and
  reads only that one and those named as its own would be (its finalizer still looks for them);
* no zonal-shift permission (``settings.enableZonalShift`` stays off);
* resources are scoped by the ``eks:eks-cluster-name`` tag, which Karpenter puts on everything it
  creates, instead of ``kubernetes.io/cluster/<name>``: the cluster's name is known only at deploy,
  and CloudFormation cannot put a value inside a condition key.

The controller runs on the system nodes, so it never waits for a node it would launch itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aws_cdk import Duration, Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from trainium_job.scheduling import SYSTEM_NODE_LABEL

from ..arguments import AnyCluster, require_cluster
from ..cluster.helm import HELM_TIMEOUT
from ..cluster.managed_addons import pod_identity_association, pod_identity_role
from ..monitoring.karpenter_capacity import karpenter_chart_monitoring_values
from ..nag import KARPENTER_ACKNOWLEDGEMENTS, acknowledge_own_findings, cluster_name_field
from ..versions import AddonPin, ChartEvidence, Declared

#: Namespace and service account of the controller (the getting-started guide's).
KARPENTER_NAMESPACE = "kube-system"
KARPENTER_SERVICE_ACCOUNT = "karpenter"
#: Tag Karpenter puts on every instance, volume, interface, launch template and fleet it creates
#: (the published policy's ``AllowScopedEC2InstanceActionsWithTags`` requires it on each request).
CLUSTER_NAME_TAG = "eks:eks-cluster-name"
#: Tag key Karpenter puts on what it launches for a NodePool.
NODEPOOL_TAG = "karpenter.sh/nodepool"
#: EventBridge events Karpenter's interruption controller reads from its queue: (source,
#: detail-type). The published template's five rules; Karpenter drains a node on each but the
#: rebalance recommendation (pkg/controllers/interruption/utils.go L207-216).
INTERRUPTION_EVENTS = (
    ("aws.health", "AWS Health Event"),
    ("aws.ec2", "EC2 Spot Instance Interruption Warning"),
    ("aws.ec2", "EC2 Instance Rebalance Recommendation"),
    ("aws.ec2", "EC2 Instance State-change Notification"),
    ("aws.ec2", "EC2 Capacity Reservation Instance Interruption Warning"),
)
#: Seconds an interruption message is kept: the published queue's ``MessageRetentionPeriod``.
INTERRUPTION_RETENTION_S = 300
#: Feature gates set explicitly: node repair replaces a node whose ``AcceleratedHardwareReady``
#: (the EKS node monitoring agent's Neuron condition) is False for 10 minutes, as the managed
#: nodegroup's auto-repair does (alpha in v1.14.1: cloudprovider.go L305-346); reserved capacity
#: (beta, on by default) targets a capacity reservation or Capacity Block.
FEATURE_GATES = {"nodeRepair": True, "reservedCapacity": True}


# Karpenter (aws/karpenter-provider-aws v1.14.1, 2026-08-20), only with
# trainium_capacity=karpenter. Chart version = app version: the release script stamps both
# before `helm push` (hack/release/common.sh L100-101, L114-115); Kubernetes 1.35 needs >= 1.9
# and 1.36 >= 1.13 (website/content/en/v1.14/upgrading/compatibility.md L18-20). The CRDs come
# from their own chart, as the upgrade guide recommends (its templates are upgraded with it;
# the main chart's crds/ folder is installed once and never upgraded).
# The CRDs come from the same release as the controller: one declaration for both charts.
_DECLARED = Declared(
    True,
    "aws/karpenter-provider-aws@1d927085:website/content/en/v1.14/upgrading/compatibility.md:18-20 "
    "(1.34: >= 1.6, 1.35: >= 1.9, 1.36: >= 1.13)",
)

#: The CRD chart.
CRD_CHART = AddonPin(
    "karpenter-crd",
    "1.14.1",
    "oci://public.ecr.aws/karpenter/karpenter-crd",
    ChartEvidence(
        version="1.14.1",
        created="2026-08-20 (tag v1.14.1 of aws/karpenter-provider-aws, commit bde00654)",
        digest=None,
        app_version="1.14.1",
        # The chart is the tag's charts/karpenter-crd, whose Chart.yaml still reads 1.13.0 (L5-6):
        # the release script writes 1.14.1 into it before packaging (hack/release/common.sh
        # L100-101). Not main's later copy (1d927085 reads 1.14.1 but changed the CRDs).
        index="aws/karpenter-provider-aws@bde00654:charts/karpenter-crd/Chart.yaml L5-6 (1.13.0, "
        "stamped 1.14.1 at release: hack/release/common.sh L100-101)",
    ),
    compatibility=dict.fromkeys(("1.34", "1.35", "1.36"), _DECLARED),
)

#: The controller's chart.
CHART = AddonPin(
    "karpenter",
    "1.14.1",
    "oci://public.ecr.aws/karpenter/karpenter",
    ChartEvidence(
        version="1.14.1",
        created="2026-08-20 (tag v1.14.1 of aws/karpenter-provider-aws, commit bde00654)",
        digest=None,
        app_version="1.14.1",
        # As above; the controller image is stamped into values.yaml at release too
        # (common.sh L80-82), and the release's docs commit records what was pushed.
        index="aws/karpenter-provider-aws@bde00654:charts/karpenter/Chart.yaml L5-6 (1.13.0, "
        "stamped 1.14.1 at release: hack/release/common.sh L100-101); controller image digest "
        "sha256:723130949e4cab989461ff07d1be4cd781d63515432494641b33c235f300ae23 "
        "(1d927085:charts/karpenter/values.yaml L129-131, stamped by common.sh L80-82)",
    ),
    compatibility=dict.fromkeys(("1.34", "1.35", "1.36"), _DECLARED),
)


@dataclass(frozen=True)
class LaunchResources:
    """What the NodePool's nodes are launched into: the resources Karpenter may name in a launch."""

    #: The EC2NodeClass's subnet, security groups and placement group.
    subnet_id: str
    security_group_ids: tuple[str, ...]
    placement_group: str
    #: Its instance profile's ARN (Karpenter reads it; the nodes' role is passed with it).
    instance_profile_arn: str
    #: Its capacity reservation or Capacity Block, if any.
    capacity_reservation_id: str | None = None


#: In a resource list of :data:`CONTROLLER_POLICY`: the NodePool's own subnet, security groups,
#: placement group and reservation (rather than any, ``*``).
NAMED = "{named}"
_EC2 = "arn:{partition}:ec2:{region}:{account}:"
#: Images and their snapshots are AWS's (the EKS AMIs): no owner account in the ARN.
_AWS_EC2 = "arn:{partition}:ec2:{region}::"
_TAGGED = [
    _EC2 + r for r in ("fleet/*", "instance/*", "volume/*", "network-interface/*", "launch-template/*")
]
_REQUEST_TAGS = {
    "StringEquals": {f"aws:RequestTag/{CLUSTER_NAME_TAG}": "{cluster_name}"},
    "StringLike": {f"aws:RequestTag/{NODEPOOL_TAG}": "*"},
}
_OWNED = {
    "StringEquals": {f"aws:ResourceTag/{CLUSTER_NAME_TAG}": "{cluster_name}"},
    "StringLike": {f"aws:ResourceTag/{NODEPOOL_TAG}": "*"},
}
_LAUNCH = ["ec2:RunInstances", "ec2:CreateFleet"]
#: The controller's permissions: the published policy's statements, scoped as the module says.
#: Strings are templates of ``{partition}``, ``{region}``, ``{account}``, ``{cluster_name}``,
#: ``{cluster_arn}``, ``{node_role_arn}``, ``{queue_arn}`` and ``{instance_profile_arn}``;
#: :data:`NAMED` in a resource list stands for the NodePool's own resources.
CONTROLLER_POLICY: tuple[dict[str, Any], ...] = (
    {
        "sid": "AllowScopedEC2InstanceAccessActions",
        "actions": _LAUNCH,
        "resources": [_AWS_EC2 + "image/*", _AWS_EC2 + "snapshot/*", NAMED],
    },
    {
        "sid": "AllowScopedEC2LaunchTemplateAccessActions",
        "actions": _LAUNCH,
        "resources": [_EC2 + "launch-template/*"],
        "conditions": _OWNED,
    },
    {
        "sid": "AllowScopedEC2InstanceActionsWithTags",
        "actions": [*_LAUNCH, "ec2:CreateLaunchTemplate"],
        "resources": _TAGGED,
        "conditions": _REQUEST_TAGS,
    },
    {
        "sid": "AllowScopedResourceCreationTagging",
        "actions": ["ec2:CreateTags"],
        "resources": _TAGGED,
        "conditions": {
            "StringEquals": {
                f"aws:RequestTag/{CLUSTER_NAME_TAG}": "{cluster_name}",
                "ec2:CreateAction": ["RunInstances", "CreateFleet", "CreateLaunchTemplate"],
            },
            "StringLike": {f"aws:RequestTag/{NODEPOOL_TAG}": "*"},
        },
    },
    {
        "sid": "AllowScopedResourceTagging",
        "actions": ["ec2:CreateTags"],
        "resources": [_EC2 + "instance/*"],
        "conditions": {
            **_OWNED,
            "StringEqualsIfExists": {f"aws:RequestTag/{CLUSTER_NAME_TAG}": "{cluster_name}"},
            "ForAllValues:StringEquals": {
                "aws:TagKeys": [CLUSTER_NAME_TAG, "karpenter.sh/nodeclaim", "Name"]
            },
        },
    },
    {
        "sid": "AllowScopedDeletion",
        "actions": ["ec2:TerminateInstances", "ec2:DeleteLaunchTemplate"],
        "resources": [_EC2 + "instance/*", _EC2 + "launch-template/*"],
        "conditions": _OWNED,
    },
    {
        "sid": "AllowPassingInstanceRole",
        "actions": ["iam:PassRole"],
        "resources": ["{node_role_arn}"],
        "conditions": {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}},
    },
    {
        "sid": "AllowAPIServerEndpointDiscovery",
        "actions": ["eks:DescribeCluster"],
        "resources": ["{cluster_arn}"],
    },
    {
        "sid": "AllowInterruptionQueueActions",
        "actions": ["sqs:DeleteMessage", "sqs:GetQueueUrl", "sqs:ReceiveMessage"],
        "resources": ["{queue_arn}"],
    },
    {
        "sid": "AllowRegionalReadActions",
        "actions": [
            "ec2:DescribeCapacityReservations",
            "ec2:DescribeImages",
            "ec2:DescribeInstances",
            "ec2:DescribeInstanceStatus",
            "ec2:DescribeInstanceTypeOfferings",
            "ec2:DescribeInstanceTypes",
            "ec2:DescribeLaunchTemplates",
            "ec2:DescribePlacementGroups",
            "ec2:DescribeSecurityGroups",
            "ec2:DescribeSpotPriceHistory",
            "ec2:DescribeSubnets",
        ],
        # EC2's Describe actions take no resource ARN.
        "resources": ["*"],
        "conditions": {"StringEquals": {"aws:RequestedRegion": "{region}"}},
    },
    {
        "sid": "AllowSSMReadActions",
        "actions": ["ssm:GetParameter"],
        "resources": ["arn:{partition}:ssm:{region}::parameter/aws/service/*"],
    },
    # The Price List API has no resource ARNs.
    {"sid": "AllowPricingReadActions", "actions": ["pricing:GetProducts"], "resources": ["*"]},
    # The EC2NodeClass's finalizer lists the profiles Karpenter would have made for the class,
    # and the instance-profile garbage collector lists those of the cluster every 30 minutes,
    # whatever the class names: denied, the finalizer never clears and the NodePool's
    # deletion (cdk destroy) hangs (v1.14.1 pkg/controllers/nodeclass/controller.go L214-228
    # finalize -> L203-212 -> L175-189; nodeclass/garbagecollection/controller.go L104-142).
    # On every resource, as published: the call names a path prefix, not a profile.
    {
        "sid": "AllowUnscopedInstanceProfileListAction",
        "actions": ["iam:ListInstanceProfiles"],
        "resources": ["*"],
    },
    {
        "sid": "AllowInstanceProfileReadActions",
        "actions": ["iam:GetInstanceProfile"],
        # The node pool's profile, and the one the same finalizer looks up by its legacy name
        # ``<cluster>_<hash>`` (controller.go L191-201, pkg/apis/v1/ec2nodeclass.go L612-614;
        # pkg/providers/instanceprofile/instanceprofile.go L188-195): only NoSuchEntity lets
        # it go on, AccessDenied is an error (pkg/errors/errors.go L40-48, L71-86).
        "resources": [
            "{instance_profile_arn}",
            "arn:{partition}:iam::{account}:instance-profile/{cluster_name}_*",
        ],
    },
)


def controller_statements(
    stack: Stack,
    *,
    cluster_name: str,
    cluster_arn: str,
    node_role_arn: str,
    queue_arn: str,
    launch: LaunchResources,
) -> list[iam.PolicyStatement]:
    """The statements of :data:`CONTROLLER_POLICY` for this cluster and NodePool."""
    partition, region, account = stack.partition, stack.region, stack.account
    values = {
        "partition": partition,
        "region": region,
        "account": account,
        "cluster_name": cluster_name,
        "cluster_arn": cluster_arn,
        "node_role_arn": node_role_arn,
        "queue_arn": queue_arn,
        "instance_profile_arn": launch.instance_profile_arn,
    }
    own = [
        f"subnet/{launch.subnet_id}",
        *(f"security-group/{group}" for group in launch.security_group_ids),
        f"placement-group/{launch.placement_group}",
        *(
            [f"capacity-reservation/{launch.capacity_reservation_id}"]
            if launch.capacity_reservation_id
            else []
        ),
    ]
    named = [_EC2.format(**values) + resource for resource in own]
    return [
        iam.PolicyStatement(
            sid=row["sid"],
            actions=list(row["actions"]),
            resources=_fill(row["resources"], values, named),
            conditions=_fill(row.get("conditions"), values, named),
        )
        for row in CONTROLLER_POLICY
    ]


def _fill(template: Any, values: dict[str, str], named: list[str]) -> Any:
    """``template`` with its strings formatted from ``values`` and :data:`NAMED` expanded."""
    if isinstance(template, str):
        return template.format(**values)
    if isinstance(template, dict):
        return {key: _fill(value, values, named) for key, value in template.items()}
    if isinstance(template, list):
        return [
            item
            for entry in template
            for item in (named if entry == NAMED else [_fill(entry, values, named)])
        ]
    return template


def chart_values(
    *,
    cluster_name: str,
    queue_name: str,
    replicas: int,
    monitored: bool = False,
    node_selector: Mapping[str, str] = SYSTEM_NODE_LABEL,
) -> dict:
    """Helm values of the controller chart (keys of charts/karpenter/values.yaml at v1.14.1);
    ``monitored``: with the ServiceMonitor of the platform's Prometheus; ``node_selector``: the
    labels of the system nodes it runs on."""
    return {
        **(karpenter_chart_monitoring_values() if monitored else {}),
        "serviceAccount": {"name": KARPENTER_SERVICE_ACCOUNT},
        "replicas": replicas,
        "nodeSelector": {"kubernetes.io/os": "linux", **node_selector},
        # The chart's default spreads the replicas over zones with DoNotSchedule: the system
        # nodes may all sit in one of the two AZs, which would leave a replica pending.
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "ScheduleAnyway",
            }
        ],
        "controller": {
            "resources": {
                "requests": {"cpu": "250m", "memory": "512Mi"},
                "limits": {"memory": "1Gi"},
            }
        },
        "settings": {
            "clusterName": cluster_name,
            "interruptionQueue": queue_name,
            "featureGates": dict(FEATURE_GATES),
        },
    }


class KarpenterController(Construct):
    """Karpenter's CRDs and controller (pinned charts), its Pod Identity role and interruption queue.

    Attributes:
        crds: the ``karpenter-crd`` chart (NodePool, NodeClaim, EC2NodeClass).
        chart: the controller chart; anything that applies a NodePool waits for it.
        role: the controller's IAM role (EKS Pod Identity).
        queue: the SQS interruption queue the EventBridge rules feed.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: AnyCluster,
        node_role: iam.IRole,
        launch: LaunchResources,
        system_nodes: int = 2,
        monitored: bool = False,
        crd_pin: AddonPin = CRD_CHART,
        pin: AddonPin = CHART,
        system_node_selector: Mapping[str, str] = SYSTEM_NODE_LABEL,
    ) -> None:
        """
        Args:
            cluster: the cluster (with a kubectl provider).
            node_role: the role of the nodes Karpenter launches (the only role it may pass).
            launch: the EC2NodeClass's subnet, groups, placement group, profile and reservation.
            system_nodes: system nodes; the controller runs one replica on each, at most 2.
                Default 2.
            monitored: the platform's Prometheus scrapes the controller (its chart's
                ServiceMonitor; the chart must then be installed after kube-prometheus-stack's
                CRDs, or it renders none). Default False.
            crd_pin, pin: the two charts. Default :data:`CRD_CHART`, :data:`CHART`.
            system_node_selector: the labels of the system nodes the controller runs on. Default
                ``SYSTEM_NODE_LABEL`` (the system nodegroup :class:`TrainiumCluster` makes).
        """
        super().__init__(scope, id)
        cluster = require_cluster(cluster)
        self.queue = self._interruption_queue()
        self.role, association = self._controller_role(cluster, node_role, launch)

        self.crds = eks.HelmChart(
            self,
            "Crds",
            cluster=cluster,
            **crd_pin.chart_props(),
            release="karpenter-crd",
            namespace=KARPENTER_NAMESPACE,
            wait=True,
            timeout=HELM_TIMEOUT,
        )
        self.chart = eks.HelmChart(
            self,
            "Chart",
            cluster=cluster,
            **pin.chart_props(),
            release="karpenter",
            namespace=KARPENTER_NAMESPACE,
            # Ignored at aws-cdk-lib 2.275: its Helm handler reads SkipCrds and never passes
            # --skip-crds (kubectl-handler/helm/__init__.py L54, L97), so Helm 4 server-side-applies
            # this chart's crds/ over the CRD chart's on first install. Harmless while both
            # charts are the same release: the same five CRDs, the same spec, the same field
            # manager (tests/contracts/karpenter.py, CHART_CRDS). Kept for a handler that honours it.
            skip_crds=True,
            values=chart_values(
                cluster_name=cluster.cluster_name,
                queue_name=self.queue.queue_name,
                replicas=min(2, system_nodes),
                monitored=monitored,
                node_selector=system_node_selector,
            ),
            wait=True,
            timeout=HELM_TIMEOUT,
        )
        # Credentials before the controller starts (its policy attached too); CRDs before it.
        self.chart.node.add_dependency(association, self.role, self.crds)
        acknowledge_own_findings(self, KARPENTER_ACKNOWLEDGEMENTS, cluster_name_field(cluster))

    def _interruption_queue(self) -> sqs.Queue:
        """The SQS queue the interruption controller reads, fed by one EventBridge rule per
        event of :data:`INTERRUPTION_EVENTS`."""
        queue = sqs.Queue(
            self,
            "InterruptionQueue",
            retention_period=Duration.seconds(INTERRUPTION_RETENTION_S),
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
        )
        for index, (source, detail_type) in enumerate(INTERRUPTION_EVENTS):
            events.Rule(
                self,
                f"InterruptionRule{index}",
                description=f"Karpenter: {detail_type}",
                event_pattern=events.EventPattern(source=[source], detail_type=[detail_type]),
                targets=[targets.SqsQueue(queue)],
            )
        return queue

    def _controller_role(
        self, cluster: eks.ICluster, node_role: iam.IRole, launch: LaunchResources
    ) -> tuple[iam.Role, eks.CfnPodIdentityAssociation]:
        """The controller's role (:func:`controller_statements`) and its service account's Pod
        Identity association."""
        role = pod_identity_role(
            self,
            "ControllerRole",
            description="Karpenter controller: launches and terminates this cluster's Trainium nodes",
        )
        for statement in controller_statements(
            Stack.of(self),
            cluster_name=cluster.cluster_name,
            cluster_arn=cluster.cluster_arn,
            node_role_arn=node_role.role_arn,
            queue_arn=self.queue.queue_arn,
            launch=launch,
        ):
            role.add_to_principal_policy(statement)
        association = pod_identity_association(
            self,
            "ControllerPodIdentity",
            cluster=cluster,
            namespace=KARPENTER_NAMESPACE,
            service_account=KARPENTER_SERVICE_ACCOUNT,
            role=role,
        )
        return role, association
