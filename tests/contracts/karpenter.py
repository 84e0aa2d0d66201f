"""What Karpenter 1.14.1 reads from the objects and the IAM policy the platform gives it.

Read at aws/karpenter-provider-aws tag v1.14.1 (``_AWS``), kubernetes-sigs/karpenter tag v1.14.1
(``_CORE``), and the getting-started ``cloudformation.yaml`` of the v1.14 docs, byte-identical to
the ``preview`` copy at the tag that the guide downloads (``_CFN``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

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


def _leaves(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item, f"{path}[]")
    else:
        yield path, value


def spec_problems(spec: Mapping[str, Any], fields: tuple[Field, ...], free: tuple[str, ...]) -> list[str]:
    """What in ``spec`` its CRD refuses: a leaf not in ``fields`` (unless under a ``free`` prefix), a
    value outside its enum or pattern (CloudFormation placeholders pass the patterns)."""
    table = {f.path: f for f in fields}
    problems = []
    for path, value in _leaves(spec):
        field = table.get(path)
        if field is None:
            if not any(path.startswith(prefix) for prefix in free):
                problems.append(f"{path}: not a field of the table")
            continue
        text = str(value)
        placeholder = text.startswith(("REF_", "ATT_", "FN_"))
        if field.enum and text not in field.enum:
            problems.append(f"{path}={text!r}: not one of {field.enum} ({field.source})")
        if field.pattern and not placeholder and not re.search(field.pattern, text):
            problems.append(f"{path}={text!r}: does not match {field.pattern} ({field.source})")
    return problems


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


@dataclass(frozen=True)
class PolicyStatement:
    """One ``Allow`` statement of a policy: its actions, resources and conditions (operator ->
    key -> values), with CloudFormation's ``${...}`` placeholders as the published template has
    them; ``lines``: where it is in the template."""

    lines: str
    actions: frozenset[str]
    resources: frozenset[str]
    conditions: Mapping[str, Mapping[str, frozenset[str]]] = field(default_factory=dict)


def _statement(lines: str, actions: str, resources: str, conditions: dict | None = None) -> PolicyStatement:
    def values(value: str | tuple[str, ...]) -> frozenset[str]:
        return frozenset([value] if isinstance(value, str) else value)

    return PolicyStatement(
        lines,
        frozenset(actions.split()),
        frozenset(resources.split()),
        {op: {key: values(v) for key, v in keys.items()} for op, keys in (conditions or {}).items()},
    )


_EC2_ARN = "arn:${AWS::Partition}:ec2:${AWS::Region}"
_PROFILES = "arn:${AWS::Partition}:iam::${AWS::AccountId}:instance-profile/*"
_CLUSTER_TAG = "kubernetes.io/cluster/${ClusterName}"
_TAGGED = " ".join(
    f"{_EC2_ARN}:*:{kind}/*"
    for kind in (
        "fleet",
        "instance",
        "volume",
        "network-interface",
        "launch-template",
        "spot-instances-request",
    )
)
_OWNED = {
    "StringEquals": {f"aws:ResourceTag/{_CLUSTER_TAG}": "owned"},
    "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"},
}
_REQUESTED = {
    f"aws:RequestTag/{_CLUSTER_TAG}": "owned",
    "aws:RequestTag/eks:eks-cluster-name": "${ClusterName}",
}
_PROFILE_OWNED = {
    f"aws:ResourceTag/{_CLUSTER_TAG}": "owned",
    "aws:ResourceTag/topology.kubernetes.io/region": "${AWS::Region}",
}
_PROFILE_REQUESTED = {**_REQUESTED, "aws:RequestTag/topology.kubernetes.io/region": "${AWS::Region}"}

#: The controller policy as published, statement by statement (Sid -> statement), transcribed
#: from the template's six managed policies; ``${...}`` are its parameters and resources.
PUBLISHED_POLICY: dict[str, PolicyStatement] = {
    "AllowScopedEC2InstanceAccessActions": _statement(
        "39-53",
        "ec2:RunInstances ec2:CreateFleet",
        f"{_EC2_ARN}::image/* {_EC2_ARN}::snapshot/* {_EC2_ARN}:*:security-group/* {_EC2_ARN}:*:subnet/* "
        f"{_EC2_ARN}:*:capacity-reservation/* {_EC2_ARN}:*:placement-group/*",
    ),
    "AllowScopedEC2LaunchTemplateAccessActions": _statement(
        "55-70", "ec2:RunInstances ec2:CreateFleet", f"{_EC2_ARN}:*:launch-template/*", _OWNED
    ),
    "AllowScopedEC2InstanceActionsWithTags": _statement(
        "72-96",
        "ec2:RunInstances ec2:CreateFleet ec2:CreateLaunchTemplate",
        _TAGGED,
        {"StringEquals": _REQUESTED, "StringLike": {"aws:RequestTag/karpenter.sh/nodepool": "*"}},
    ),
    "AllowScopedResourceCreationTagging": _statement(
        "98-123",
        "ec2:CreateTags",
        _TAGGED,
        {
            "StringEquals": {
                **_REQUESTED,
                "ec2:CreateAction": ("RunInstances", "CreateFleet", "CreateLaunchTemplate"),
            },
            "StringLike": {"aws:RequestTag/karpenter.sh/nodepool": "*"},
        },
    ),
    "AllowScopedResourceTagging": _statement(
        "125-147",
        "ec2:CreateTags",
        f"{_EC2_ARN}:*:instance/*",
        {
            **_OWNED,
            "StringEqualsIfExists": {"aws:RequestTag/eks:eks-cluster-name": "${ClusterName}"},
            "ForAllValues:StringEquals": {
                "aws:TagKeys": ("eks:eks-cluster-name", "karpenter.sh/nodeclaim", "Name")
            },
        },
    ),
    "AllowScopedDeletion": _statement(
        "149-167",
        "ec2:TerminateInstances ec2:DeleteLaunchTemplate",
        f"{_EC2_ARN}:*:instance/* {_EC2_ARN}:*:launch-template/*",
        _OWNED,
    ),
    "AllowPassingInstanceRole": _statement(
        "182-194",
        "iam:PassRole",
        "${KarpenterNodeRole.Arn}",
        {"StringEquals": {"iam:PassedToService": ("ec2.amazonaws.com", "ec2.amazonaws.com.cn")}},
    ),
    "AllowScopedInstanceProfileCreationActions": _statement(
        "196-212",
        "iam:CreateInstanceProfile",
        _PROFILES,
        {
            "StringEquals": _PROFILE_REQUESTED,
            "StringLike": {"aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "*"},
        },
    ),
    "AllowScopedInstanceProfileTagActions": _statement(
        "214-233",
        "iam:TagInstanceProfile",
        _PROFILES,
        {
            "StringEquals": {**_PROFILE_OWNED, **_PROFILE_REQUESTED},
            "StringLike": {
                "aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*",
                "aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "*",
            },
        },
    ),
    "AllowScopedInstanceProfileActions": _statement(
        "235-252",
        "iam:AddRoleToInstanceProfile iam:RemoveRoleFromInstanceProfile iam:DeleteInstanceProfile",
        _PROFILES,
        {
            "StringEquals": _PROFILE_OWNED,
            "StringLike": {"aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*"},
        },
    ),
    "AllowAPIServerEndpointDiscovery": _statement(
        "267-271",
        "eks:DescribeCluster",
        "arn:${AWS::Partition}:eks:${AWS::Region}:${AWS::AccountId}:cluster/${ClusterName}",
    ),
    "AllowInterruptionQueueActions": _statement(
        "286-294",
        "sqs:DeleteMessage sqs:GetQueueUrl sqs:ReceiveMessage",
        "${KarpenterInterruptionQueue.Arn}",
    ),
    "AllowZonalShiftStatusReadOnly": _statement(
        "307-318",
        "arc-zonal-shift:GetManagedResource",
        "*",
        {
            "StringEquals": {
                "arc-zonal-shift:ResourceIdentifier": (
                    "arn:${AWS::Partition}:eks:${AWS::Region}:${AWS::AccountId}:cluster/${ClusterName}"
                )
            }
        },
    ),
    "AllowRegionalReadActions": _statement(
        "333-354",
        "ec2:DescribeCapacityReservations ec2:DescribeImages ec2:DescribeInstances ec2:DescribeInstanceStatus "
        "ec2:DescribeInstanceTypeOfferings ec2:DescribeInstanceTypes ec2:DescribeLaunchTemplates "
        "ec2:DescribePlacementGroups ec2:DescribeSecurityGroups ec2:DescribeSpotPriceHistory ec2:DescribeSubnets",
        "*",
        {"StringEquals": {"aws:RequestedRegion": "${AWS::Region}"}},
    ),
    "AllowSSMReadActions": _statement(
        "356-360", "ssm:GetParameter", "arn:${AWS::Partition}:ssm:${AWS::Region}::parameter/aws/service/*"
    ),
    "AllowPricingReadActions": _statement("362-366", "pricing:GetProducts", "*"),
    "AllowUnscopedInstanceProfileListAction": _statement("368-372", "iam:ListInstanceProfiles", "*"),
    "AllowInstanceProfileReadActions": _statement("374-378", "iam:GetInstanceProfile", _PROFILES),
}
PUBLISHED_POLICY_SOURCE = f"{_CFN}:27-380"
#: Published statements the platform leaves out, and why each is not needed.
OMITTED_STATEMENTS = {
    "AllowScopedInstanceProfileCreationActions": "the EC2NodeClass names an instance profile made by the "
    "stack (spec.instanceProfile): Karpenter creates profiles only for spec.role "
    f"({_AWS}:pkg/controllers/nodeclass/instanceprofile.go:59-113; "
    "website/content/en/v1.14/concepts/nodeclasses.md:733-747 at 1d927085)",
    "AllowScopedInstanceProfileTagActions": "as above: no profile is created by Karpenter",
    "AllowScopedInstanceProfileActions": "as above: no profile is changed by Karpenter; the finalizer and the "
    "garbage collector delete only profiles they list under Karpenter's own path, or the legacy name, which "
    "this platform never makes (pkg/controllers/nodeclass/controller.go:175-212)",
    "AllowZonalShiftStatusReadOnly": "settings.enableZonalShift stays false (charts/karpenter/values.yaml:212)",
}
#: The platform's changes to the statements it keeps, each narrower than the published one.
#: A published condition ``kubernetes.io/cluster/${ClusterName}: owned`` (request or resource tag)
#: becomes ``eks:eks-cluster-name: ${ClusterName}``: the published policy itself requires that tag
#: on every RunInstances, CreateFleet and CreateLaunchTemplate (L87-95, L109-118), so all Karpenter
#: makes carries it; CloudFormation cannot put the cluster's name inside a condition key.
CLUSTER_TAG_SUBSTITUTE = ((_CLUSTER_TAG, "owned"), ("eks:eks-cluster-name", "${ClusterName}"))
#: (Sid, published resource) -> the platform's resources, and why. ``${Subnet}``,
#: ``${SecurityGroup}``, ``${PlacementGroup}``, ``${CapacityReservation}`` and
#: ``${InstanceProfile.Arn}`` stand for each one the EC2NodeClasses name (none: no resource).
#: Every other EC2 ARN of the published policy keeps its resource and has the stack's account
#: for ``*`` (the platform launches only in its own account).
NARROWED_RESOURCES: dict[tuple[str, str], tuple[tuple[str, ...], str]] = {
    **{
        ("AllowScopedEC2InstanceAccessActions", f"{_EC2_ARN}:*:{kind}/*"): (
            (f"{_EC2_ARN}:${{AWS::AccountId}}:{kind}/${{{name}}}",),
            "a launch may name only the EC2NodeClasses' own",
        )
        for kind, name in (
            ("security-group", "SecurityGroup"),
            ("subnet", "Subnet"),
            ("capacity-reservation", "CapacityReservation"),
            ("placement-group", "PlacementGroup"),
        )
    },
    **{
        (sid, f"{_EC2_ARN}:*:spot-instances-request/*"): (
            (),
            "no NodePool allows the spot capacity type (checked beside the comparison)",
        )
        for sid in ("AllowScopedEC2InstanceActionsWithTags", "AllowScopedResourceCreationTagging")
    },
    ("AllowInstanceProfileReadActions", _PROFILES): (
        (
            "${InstanceProfile.Arn}",
            "arn:${AWS::Partition}:iam::${AWS::AccountId}:instance-profile/${ClusterName}_*",
        ),
        "the EC2NodeClasses' profile, and the legacy name <cluster>_<hash> the finalizer looks up "
        "(see FINALIZER_IAM_CALLS)",
    ),
    (
        "AllowAPIServerEndpointDiscovery",
        "arn:${AWS::Partition}:eks:${AWS::Region}:${AWS::AccountId}:cluster/${ClusterName}",
    ): (
        ("${Cluster.Arn}",),
        "the same ARN: what Fn::GetAtt Arn of an AWS::EKS::Cluster returns (CloudFormation "
        "AWS::EKS::Cluster, Return values: arn:aws:eks:us-west-2:666666666666:cluster/prod)",
    ),
}
#: (Sid, operator, key) -> the platform's values, and why.
NARROWED_CONDITIONS: dict[tuple[str, str, str], tuple[frozenset[str], str]] = {
    ("AllowPassingInstanceRole", "StringEquals", "iam:PassedToService"): (
        frozenset({"ec2.amazonaws.com"}),
        "ec2.amazonaws.com.cn is EC2 in the China partition, whose regions the configuration refuses "
        "(trainium_eks/config/platform_checks.py, SUPPORTED_PARTITIONS)",
    ),
}
#: The IAM calls Karpenter makes whatever the EC2NodeClass names, with ``${...}`` as above
#: (``${ClusterName}_1`` stands for a legacy name ``<cluster>_<hash>``): (action, resource, source).
#: Each denied one keeps the EC2NodeClass's finalizer, and so the stack's deletion, waiting.
FINALIZER_IAM_CALLS = (
    (
        "iam:ListInstanceProfiles",
        "*",
        f"{_AWS}:pkg/controllers/nodeclass/controller.go:175-189 (finalize L214-228 -> "
        "cleanupManagedInstanceProfiles L203-212, skipped only with isolatedVPC); "
        "pkg/controllers/nodeclass/garbagecollection/controller.go:104-142 (every 30 minutes)",
    ),
    (
        "iam:GetInstanceProfile",
        "arn:${AWS::Partition}:iam::${AWS::AccountId}:instance-profile/${ClusterName}_1",
        f"{_AWS}:pkg/controllers/nodeclass/controller.go:191-201 (cleanupLegacyInstanceProfile); "
        "pkg/apis/v1/ec2nodeclass.go:612-614 (LegacyInstanceProfileName); "
        "pkg/providers/instanceprofile/instanceprofile.go:188-195 (Delete: GetInstanceProfile first, "
        "only NoSuchEntity ignored: pkg/errors/errors.go:40-48, 71-86)",
    ),
)
#: aws-cdk-lib 2.275.0's Helm handler, in its jsii package: it reads ``SkipCrds`` (L54) but its
#: one install call, ``helm('upgrade', ...)`` (L97), does not pass it, so ``helm()`` never adds
#: ``--skip-crds`` (L209-228: only when its ``skip_crds`` argument is true).
HELM_HANDLER_MEMBER = "package/custom-resource-handlers/dist/aws-eks-v2/kubectl-handler/helm/__init__.py"
#: So Helm installs the controller chart's ``crds/`` on the release's first install
#: (``upgrade --install`` of a new release runs the install action with server-side apply unless
#: ``--server-side=false``: helm v4.1.3 pkg/cmd/upgrade.go L122-157; install.go L313-322), by a
#: server-side apply of each CRD (install.go L180-215; pkg/kube/client.go L312-368), not a create
#: that would stop at AlreadyExists, under the field manager named after the binary, ``helm``, the
#: same for both releases (client.go L927-945). The kubectl-v35 layer's Helm is 4.1.3; the
#: v36 layer's 4.2.3 does the same (install.go L185-212, upgrade.go L158).
#: They cannot conflict at v1.14.1: the two charts hold the same five CRDs (charts/karpenter/crds/*
#: are links to pkg/apis/crds/*; charts/karpenter-crd/templates/* are those files with an
#: ``additionalAnnotations`` block, empty by default: charts/karpenter-crd/values.yaml L1-2), so
#: the second apply changes no field's value and, from the same manager, meets no conflict. The
#: CRD chart goes first (its CRDs, with Helm's metadata, belong to its release, which deletes them
#: on destroy; ``crds/`` are never deleted or upgraded by Helm). Read at both charts' version:
CHART_CRDS_VERSION = "1.14.1"
CHART_CRDS = (
    "autoscaling.x-k8s.io_capacitybuffers",
    "karpenter.k8s.aws_ec2nodeclasses",
    "karpenter.sh_nodeclaims",
    "karpenter.sh_nodeoverlays",
    "karpenter.sh_nodepools",
)
CHART_CRDS_SOURCE = f"{_AWS}:charts/karpenter/crds/, charts/karpenter-crd/templates/, pkg/apis/crds/"
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
    # The largest preparation node (L20379-20406).
    "m7i.12xlarge": (47810, 178933, 234, 0, 0),
}
KARPENTER_ALLOCATABLE_SOURCE = (
    "aws/karpenter-provider-aws@1d927085:website/content/en/v1.14/reference/instance-types.md:"
    "36674-36690 (trn1.2xlarge), 36708-36743 (trn1.32xlarge), 36744-36779 (trn1n), 36780-36815 (trn2), "
    "20379-20406 (m7i.12xlarge)"
)

#: Requirement keys Karpenter knows (``WellKnownLabels``): a NodePool requirement on another key in
#: a restricted domain is refused; on these, Karpenter picks offerings and labels the node.
WELL_KNOWN_REQUIREMENT_KEYS = {
    "node.kubernetes.io/instance-type": f"{_CORE}:pkg/apis/v1/labels.go:75-79",
    "karpenter.sh/capacity-type": f"{_CORE}:pkg/apis/v1/labels.go:45",
    "topology.k8s.aws/zone-id": f"{_AWS}:pkg/apis/v1/labels.go:33,58,172",
    "karpenter.k8s.aws/instance-family": f"{_AWS}:pkg/apis/v1/labels.go:33,41,150",
    "karpenter.k8s.aws/instance-cpu": f"{_AWS}:pkg/apis/v1/labels.go:33,45,154",
}
#: Requirement keys whose values Karpenter compares as integers (``Gt``, ``Lt``, ``Gte``, ``Lte``:
#: one non-negative integer value), as the instance-type reference lists them for each type.
NUMERIC_REQUIREMENT_KEYS = {
    "karpenter.k8s.aws/instance-cpu": f"{_NODEPOOLS}:304-342; {_CORE}:pkg/scheduling/requirement.go:96-106",
}
#: The labels of the largest preparation node, m7i.12xlarge, in Karpenter's instance-type reference
#: (its requirements must admit it): family and vCPUs.
M7I_12XLARGE_LABELS = {"karpenter.k8s.aws/instance-family": "m7i", "karpenter.k8s.aws/instance-cpu": "48"}
M7I_12XLARGE_SOURCE = (
    "aws/karpenter-provider-aws@1d927085:website/content/en/v1.14/reference/instance-types.md:20379-20406"
)
