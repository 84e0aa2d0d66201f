"""What Karpenter 1.14.1 reads from the objects and the IAM policy the platform gives it.

Read at aws/karpenter-provider-aws tag v1.14.1 (``_AWS``), kubernetes-sigs/karpenter tag v1.14.1
(``_CORE``), and the getting-started ``cloudformation.yaml`` of the v1.14 docs, byte-identical to
the ``preview`` copy at the tag that the guide downloads (``_CFN``).
"""

from __future__ import annotations

from dataclasses import dataclass

_AWS = "aws/karpenter-provider-aws@v1.14.1"
_CORE = "kubernetes-sigs/karpenter@v1.14.1"
_CFN = f"{_AWS}:website/content/en/preview/getting-started/getting-started-with-karpenter/cloudformation.yaml"
_NODEPOOLS = f"{_AWS}:pkg/apis/crds/karpenter.sh_nodepools.yaml"
_NODECLASSES = f"{_AWS}:pkg/apis/crds/karpenter.k8s.aws_ec2nodeclasses.yaml"

_DURATION_OR_NEVER = r"^(([0-9]+(s|m|h))+|Never)$"


@dataclass(frozen=True)
class Field:
    """A field of a Karpenter object, as its CRD validates it.

    Attributes:
        path: dotted path under ``spec`` (``[]`` marks a list's items).
        source: the CRD file and line.
        pattern: the regular expression its value must match, if any.
        enum: the values it accepts, if it is an enumeration.
    """

    path: str
    source: str
    pattern: str | None = None
    enum: tuple[str, ...] = ()


NODE_POOL_FIELDS = (
    Field("template.metadata.labels", f"{_NODEPOOLS}:210-214"),
    Field("template.spec.nodeClassRef.group", f"{_NODEPOOLS}:251-257", pattern=r"^[^/]*$"),
    Field("template.spec.nodeClassRef.kind", f"{_NODEPOOLS}:258-263"),
    Field("template.spec.nodeClassRef.name", f"{_NODEPOOLS}:264-268"),
    Field("template.spec.requirements[].key", f"{_NODEPOOLS}:287-291"),
    Field(
        "template.spec.requirements[].operator",
        f"{_NODEPOOLS}:311-320",
        enum=("Gte", "Lte", "In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"),
    ),
    Field("template.spec.requirements[].values[]", f"{_NODEPOOLS}:322-334"),
    Field("template.spec.taints[].key", f"{_NODEPOOLS}:406-410"),
    Field("template.spec.taints[].value", f"{_NODEPOOLS}:415-418"),
    Field(
        "template.spec.taints[].effect",
        f"{_NODEPOOLS}:402-405",
        enum=("NoSchedule", "PreferNoSchedule", "NoExecute"),
    ),
    Field("template.spec.startupTaints[].key", f"{_NODEPOOLS}:370-374"),
    Field("template.spec.startupTaints[].value", f"{_NODEPOOLS}:379-382"),
    Field(
        "template.spec.startupTaints[].effect",
        f"{_NODEPOOLS}:360-369",
        enum=("NoSchedule", "PreferNoSchedule", "NoExecute"),
    ),
    Field("template.spec.expireAfter", f"{_NODEPOOLS}:239-246", pattern=_DURATION_OR_NEVER),
    Field("template.spec.terminationGracePeriod", f"{_NODEPOOLS}:425-440", pattern=r"^([0-9]+(s|m|h))+$"),
    Field(
        "disruption.consolidationPolicy",
        f"{_NODEPOOLS}:153-163",
        enum=("WhenEmpty", "WhenEmptyOrUnderutilized", "Balanced"),
    ),
    Field("disruption.consolidateAfter", f"{_NODEPOOLS}:145-151", pattern=_DURATION_OR_NEVER),
    Field("disruption.budgets[].nodes", f"{_NODEPOOLS}:101-111", pattern=r"^((100|[0-9]{1,2})%|[0-9]+)$"),
    Field(
        "disruption.budgets[].reasons[]", f"{_NODEPOOLS}:113-123", enum=("Underutilized", "Empty", "Drifted")
    ),
    Field("limits.cpu", f"{_NODEPOOLS}:168-178"),
)

NODE_CLASS_FIELDS = (
    Field(
        "amiSelectorTerms[].alias",
        f"{_NODECLASSES}:77-95; pkg/apis/v1/ec2nodeclass.go:237-271",
        pattern=r"^[a-zA-Z0-9]+@.+$",
    ),
    Field("instanceProfile", f"{_NODECLASSES}:358"),
    Field("subnetSelectorTerms[].id", f"{_NODECLASSES}:670", pattern=r"subnet-[0-9a-z]+"),
    Field("securityGroupSelectorTerms[].id", f"{_NODECLASSES}:631", pattern=r"sg-[0-9a-z]+"),
    Field("placementGroupSelector.name", f"{_NODECLASSES}:606; pkg/apis/v1/ec2nodeclass.go:224-233"),
    Field("metadataOptions.httpEndpoint", f"{_NODECLASSES}:492-497", enum=("enabled", "disabled")),
    Field("metadataOptions.httpProtocolIPv6", f"{_NODECLASSES}:492-497", enum=("enabled", "disabled")),
    Field("metadataOptions.httpPutResponseHopLimit", f"{_NODECLASSES}:492-497"),
    Field("metadataOptions.httpTokens", f"{_NODECLASSES}:492-497", enum=("required", "optional")),
    Field("blockDeviceMappings[].deviceName", f"{_NODECLASSES}:149"),
    Field("blockDeviceMappings[].rootVolume", f"{_NODECLASSES}:245"),
    Field("blockDeviceMappings[].ebs.volumeSize", f"{_NODECLASSES}:210"),
    Field(
        "blockDeviceMappings[].ebs.volumeType",
        f"{_NODECLASSES}:225",
        enum=("standard", "io1", "io2", "gp2", "sc1", "st1", "gp3"),
    ),
    Field("blockDeviceMappings[].ebs.encrypted", f"{_NODECLASSES}:158"),
    Field("blockDeviceMappings[].ebs.deleteOnTermination", f"{_NODECLASSES}:152"),
    Field("tags", f"{_NODECLASSES}:702"),
    Field("userData", f"{_NODECLASSES}:720; pkg/providers/amifamily/bootstrap/nodeadm.go:128-153"),
    Field("networkInterfaces[].networkCardIndex", f"{_NODECLASSES}:571"),
    Field("networkInterfaces[].deviceIndex", f"{_NODECLASSES}:571"),
    Field("networkInterfaces[].interfaceType", f"{_NODECLASSES}:571", enum=("interface", "efa-only")),
    Field("capacityReservationSelectorTerms[].id", f"{_NODECLASSES}:256", pattern=r"^cr-[0-9a-z]+$"),
)

#: The EFA interfaces Karpenter attaches by itself when a node's pods request
#: ``vpc.amazonaws.com/efa`` and the EC2NodeClass lists no ``networkInterfaces``: one per EFA the
#: instance type supports (its ``MaximumEfaInterfaces``), on network card i, device index 0 on
#: card 0 and 1 on the others, type ``efa``, each with every security group of the EC2NodeClass.
EFA_AUTO_LAYOUT_SOURCE = (
    f"{_AWS}:pkg/providers/launchtemplate/launchtemplate.go:334-353; "
    "pkg/providers/amifamily/resolver.go:192-196; pkg/providers/instancetype/types.go:479-481"
)
#: An AMI alias of family ``al2023`` gives a Trainium type the Neuron variant of that release: the
#: ``neuron`` variant requires ``karpenter.k8s.aws/instance-accelerator-count`` (trn1 has one) and
#: the standard variant requires it absent.
NEURON_VARIANT_SOURCE = (
    f"{_AWS}:pkg/providers/amifamily/al2023.go:40-80; pkg/providers/amifamily/types.go:86-99"
)
#: A pod annotation that keeps its node from voluntary disruption.
DO_NOT_DISRUPT = ("karpenter.sh/do-not-disrupt", f"{_CORE}:pkg/apis/v1/labels.go:50")
#: Karpenter's feature gate that repairs nodes from their conditions (AcceleratedHardwareReady
#: False for 10 minutes, as the EKS node monitoring agent reports Neuron faults).
NODE_REPAIR_SOURCE = f"{_AWS}:pkg/cloudprovider/cloudprovider.go:305-346"

#: The controller policy's statements as published: Sid -> actions.
PUBLISHED_STATEMENTS: dict[str, frozenset[str]] = {
    "AllowScopedEC2InstanceAccessActions": frozenset({"ec2:RunInstances", "ec2:CreateFleet"}),
    "AllowScopedEC2LaunchTemplateAccessActions": frozenset({"ec2:RunInstances", "ec2:CreateFleet"}),
    "AllowScopedEC2InstanceActionsWithTags": frozenset(
        {"ec2:RunInstances", "ec2:CreateFleet", "ec2:CreateLaunchTemplate"}
    ),
    "AllowScopedResourceCreationTagging": frozenset({"ec2:CreateTags"}),
    "AllowScopedResourceTagging": frozenset({"ec2:CreateTags"}),
    "AllowScopedDeletion": frozenset({"ec2:TerminateInstances", "ec2:DeleteLaunchTemplate"}),
    "AllowPassingInstanceRole": frozenset({"iam:PassRole"}),
    "AllowScopedInstanceProfileCreationActions": frozenset({"iam:CreateInstanceProfile"}),
    "AllowScopedInstanceProfileTagActions": frozenset({"iam:TagInstanceProfile"}),
    "AllowScopedInstanceProfileActions": frozenset(
        {"iam:AddRoleToInstanceProfile", "iam:RemoveRoleFromInstanceProfile", "iam:DeleteInstanceProfile"}
    ),
    "AllowAPIServerEndpointDiscovery": frozenset({"eks:DescribeCluster"}),
    "AllowInterruptionQueueActions": frozenset(
        {"sqs:DeleteMessage", "sqs:GetQueueUrl", "sqs:ReceiveMessage"}
    ),
    "AllowZonalShiftStatusReadOnly": frozenset({"arc-zonal-shift:GetManagedResource"}),
    "AllowRegionalReadActions": frozenset(
        {
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
        }
    ),
    "AllowSSMReadActions": frozenset({"ssm:GetParameter"}),
    "AllowPricingReadActions": frozenset({"pricing:GetProducts"}),
    "AllowUnscopedInstanceProfileListAction": frozenset({"iam:ListInstanceProfiles"}),
    "AllowInstanceProfileReadActions": frozenset({"iam:GetInstanceProfile"}),
}
PUBLISHED_STATEMENTS_SOURCE = f"{_CFN}:27-380"
#: Published statements the platform leaves out, and why each is not needed.
OMITTED_STATEMENTS = {
    "AllowScopedInstanceProfileCreationActions": "the EC2NodeClass names an instance profile made by the "
    "stack (spec.instanceProfile): Karpenter manages profiles only for spec.role "
    f"({_AWS}:website/content/en/v1.14/concepts/nodeclasses.md:733-747)",
    "AllowScopedInstanceProfileTagActions": "as above: no profile is created by Karpenter",
    "AllowScopedInstanceProfileActions": "as above: no profile is changed or deleted by Karpenter",
    "AllowUnscopedInstanceProfileListAction": "listing is for the garbage collection of profiles Karpenter made",
    "AllowZonalShiftStatusReadOnly": "settings.enableZonalShift stays false (charts/karpenter/values.yaml:212)",
}
#: The interruption queue's rules as published: (source, detail-type), and the queue's settings.
PUBLISHED_INTERRUPTION_EVENTS = frozenset(
    {
        ("aws.health", "AWS Health Event"),
        ("aws.ec2", "EC2 Spot Instance Interruption Warning"),
        ("aws.ec2", "EC2 Instance Rebalance Recommendation"),
        ("aws.ec2", "EC2 Instance State-change Notification"),
        ("aws.ec2", "EC2 Capacity Reservation Instance Interruption Warning"),
    }
)
PUBLISHED_QUEUE = {"MessageRetentionPeriod": 300, "SqsManagedSseEnabled": True}
PUBLISHED_QUEUE_SOURCE = f"{_CFN}:381-464"

#: What Karpenter 1.14.1 takes a node of each Trainium type to offer pods (its instance-type
#: reference, generated from its own capacity and overhead code: kube-reserved, eviction threshold
#: and 7.5% VM memory overhead, pkg/providers/instancetype/types.go L332-364, L522): it launches a
#: node for a pod only if the pod and the node's DaemonSets fit in this. (cpu millicores, memory
#: MiB, pods, Neuron devices, EFA interfaces.) Its ephemeral storage is for its default 20 GiB
#: root volume; the EC2NodeClass sets the nodegroup's.
KARPENTER_ALLOCATABLE = {
    "trn1.32xlarge": (127610, 481894, 247, 16, 8),
    "trn1n.32xlarge": (127610, 481894, 247, 16, 16),
    "trn2.48xlarge": (191450, 1938410, 100, 16, 16),
    "trn1.2xlarge": (7910, 29317, 58, 1, 0),
}
KARPENTER_ALLOCATABLE_SOURCE = (
    "aws/karpenter-provider-aws@1d927085:website/content/en/v1.14/reference/instance-types.md:"
    "36674-36690 (trn1.2xlarge), 36708-36743 (trn1.32xlarge), 36744-36779 (trn1n), 36780-36815 (trn2)"
)

#: Requirement keys Karpenter knows (``WellKnownLabels``): a NodePool requirement on another key in
#: a restricted domain is refused; on these, Karpenter picks offerings and labels the node.
WELL_KNOWN_REQUIREMENT_KEYS = {
    "node.kubernetes.io/instance-type": f"{_CORE}:pkg/apis/v1/labels.go:75-79",
    "karpenter.sh/capacity-type": f"{_CORE}:pkg/apis/v1/labels.go:45",
    "topology.k8s.aws/zone-id": f"{_AWS}:pkg/apis/v1/labels.go:33,58,172",
}
