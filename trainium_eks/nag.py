"""cdk-nag: the one place where AwsSolutions findings are acknowledged, each with its reason.

Each table belongs to the construct that owns the resources it names, and that construct applies
it to itself when it builds them (so an app that composes the pieces, not only
:class:`TrainiumPlatform`, passes a nag-gated synth): each entry names the resource (its path
under the owner), the exact finding and why it is accepted. The owners: an ``aws_eks_v2`` cluster
(:data:`EKS_CLUSTER_ACKNOWLEDGEMENTS`, aws-cdk-lib's own parts: applied by :class:`TrainiumCluster`,
and by :func:`acknowledge_cluster_findings` for a cluster of the app's own), :class:`TrainiumCluster`,
the Trainium nodegroup and node pool, Karpenter's controller, the FSx and EBS CSI drivers, the
Container Insights agent, the node replacement role, and :class:`TrainingWorkload`. A path that
no longer exists, or an entry that matches no finding, is an error, so a stale entry cannot hide.
"""

from __future__ import annotations

import json
import os
import re
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import jsii
from aws_cdk import (
    Acknowledgment,
    CfnElement,
    CfnResource,
    PolicyValidationPluginReport,
    Stack,
    Token,
    Validations,
)
from aws_cdk import aws_eks_v2 as eks
from cdk_nag import AwsSolutionsChecks, IApplyRule, NagMessageLevel, NagPack, NagRuleCompliance
from constructs import IConstruct

from trainium_job.paths import model_key_prefix

from .deploy_time_build import HANDLER_ID, PROJECT_ID


def _managed(policy: str) -> str:
    return f"AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{policy}]"


_NODE_ROLE_POLICIES = ("AmazonEKSWorkerNodePolicy", "AmazonEC2ContainerRegistryPullOnly")
_NODE_ROLE_REASON = (
    "EKS managed nodegroups require these AWS managed policies on the node role "
    "(EKS user guide, 'Amazon EKS node IAM role'); AWS keeps them least-privilege "
    "for the kubelet, the VPC CNI and image pulls."
)
_KUBECTL = "KubectlProvider"
_KUBECTL_REASON = (
    "The kubectl provider is aws-cdk-lib's own custom resource; its roles, policies "
    "and runtime are set by the library and only run during deployments."
)

#: Under an ``aws_eks_v2`` cluster (``eks.Cluster``): aws-cdk-lib's cluster role and kubectl
#: provider, the same in every app's cluster (:func:`acknowledge_cluster_findings`).
EKS_CLUSTER_ACKNOWLEDGEMENTS: tuple[tuple[str, str, str], ...] = (
    (
        "Role",
        _managed("AmazonEKSClusterPolicy"),
        "The EKS cluster role needs AmazonEKSClusterPolicy; EKS defines no narrower policy.",
    ),
    (
        f"{_KUBECTL}/Handler/ServiceRole",
        _managed("service-role/AWSLambdaBasicExecutionRole"),
        _KUBECTL_REASON,
    ),
    (
        f"{_KUBECTL}/Handler/ServiceRole",
        _managed("service-role/AWSLambdaVPCAccessExecutionRole"),
        _KUBECTL_REASON,
    ),
    (f"{_KUBECTL}/Handler/ServiceRole", _managed("AmazonEC2ContainerRegistryReadOnly"), _KUBECTL_REASON),
    (
        f"{_KUBECTL}/Handler/ServiceRole",
        f'AwsSolutions-IAM4[Policy::{{"Fn::If":["<logical-id:{_KUBECTL}/Handler/HasEcrPublic>",'
        '{"Fn::Join":["",["arn:",{"Ref":"AWS::Partition"},":iam::aws:policy/'
        'AmazonElasticContainerRegistryPublicReadOnly"]]},{"Ref":"AWS::NoValue"}]}]',
        _KUBECTL_REASON + " ECR Public read is only attached when a chart comes from ECR Public.",
    ),
    (f"{_KUBECTL}/Handler", "AwsSolutions-L1", _KUBECTL_REASON),
    (
        f"{_KUBECTL}/Provider/framework-onEvent/ServiceRole",
        _managed("service-role/AWSLambdaBasicExecutionRole"),
        _KUBECTL_REASON,
    ),
    (
        f"{_KUBECTL}/Provider/framework-onEvent/ServiceRole",
        _managed("service-role/AWSLambdaVPCAccessExecutionRole"),
        _KUBECTL_REASON,
    ),
    (
        f"{_KUBECTL}/Provider/framework-onEvent/ServiceRole/DefaultPolicy",
        f"AwsSolutions-IAM5[Resource::<<logical-id:{_KUBECTL}/Handler/Resource>.Arn>:*]",
        _KUBECTL_REASON + " The wildcard covers the versions of that one handler function.",
    ),
)

#: Under :class:`TrainiumCluster`: its system nodes' role and the VPC CNI's.
TRAINIUM_CLUSTER_ACKNOWLEDGEMENTS: tuple[tuple[str, str, str], ...] = (
    *(("SystemNodeRole", _managed(policy), _NODE_ROLE_REASON) for policy in _NODE_ROLE_POLICIES),
    (
        "VpcCniRole",
        _managed("AmazonEKS_CNI_Policy"),
        "The VPC CNI's own role (EKS Pod Identity, only the aws-node service account) carries the "
        "AWS managed policy the EKS user guide prescribes for it; AWS keeps it current with the "
        "plugin's EC2 network-interface calls.",
    ),
)

#: Under :class:`TrainiumNodegroup` and :class:`TrainiumNodePool`: the Trainium nodes' role.
NODE_ROLE_ACKNOWLEDGEMENTS: tuple[tuple[str, str, str], ...] = tuple(
    ("NodeRole", _managed(policy), _NODE_ROLE_REASON) for policy in _NODE_ROLE_POLICIES
)

#: Under :class:`ModelBucket`: the bucket itself.
MODEL_BUCKET_ACKNOWLEDGEMENTS: tuple[tuple[str, str, str], ...] = (
    (
        "Bucket",
        "AwsSolutions-S1",
        "Server access logs would need a second bucket, itself unlogged and retained like this one, "
        "for a bucket written by one role under one run's prefix (trainium_eks/storage/model_bucket.py): "
        "who wrote or read which model is recorded by CloudTrail data events for S3 where the account "
        "turns them on; TLS only, Block Public Access and versioning are set on the bucket.",
    ),
)

#: Under :class:`~trainium_eks.jobs.model_writer.ModelWriter`, once per run (``<run>``; the
#: bucket as cdk-nag prints it, :func:`printed_field`): the exporting pod's role, which writes
#: objects under the run's model prefix.
MODEL_WRITER_ACKNOWLEDGEMENTS: tuple[tuple[str, str, str], ...] = (
    (
        "Role/DefaultPolicy",
        f"AwsSolutions-IAM5[Resource::arn:<stack-partition>:s3:::<model-bucket>/{model_key_prefix('<run>')}/*]",
        "The objects' keys are the exported model's files (config.json, model.safetensors, the "
        "tokenizer's), named by the export: the role may put, read back and abort uploads of objects "
        "under this one run's model prefix, list only below it, and delete nothing "
        "(trainium_eks/storage/model_bucket.py grant_model_write).",
    ),
)

#: Under :class:`FsxCsiVolume`: the FSx CSI controller's role.
FSX_CSI_ACKNOWLEDGEMENTS: tuple[tuple[str, str, str], ...] = (
    (
        "ControllerRole/DefaultPolicy",
        "AwsSolutions-IAM5[Resource::*]",
        "The FSx CSI controller's only permission is fsx:DescribeFileSystems (read-only; static "
        "volumes need no create/delete), and that action supports no resource-level permissions "
        "(Service Authorization Reference, Amazon FSx), so it can only be granted on '*'.",
    ),
)

# The hardening of a stack's image builds (paths under the construct whose image is the stack's
# first to build: trainium_eks/images/training_image.py harden_builds).
_BOUNDED = (
    " The build role carries a permissions boundary (BuildBoundary, beside the stack's first image): "
    "s3:GetObject on the build-context objects only, push to the platform's repository only, its own "
    "log group and key, kms:Decrypt through S3 only."
)
#: The stack's partition, region and account in an ARN, as cdk-nag prints them (see :func:`resolve_finding`).
_ARN = "arn:<stack-partition>:{service}:<stack-region>:<stack-account>"
IMAGE_HARDENING_ACKNOWLEDGEMENTS: tuple[tuple[str, str, str], ...] = (
    (
        "BuildBoundary",
        "AwsSolutions-IAM5[Resource::*]",
        "ecr:GetAuthorizationToken, ecr-public:GetAuthorizationToken, sts:GetServiceBearerToken and the "
        "ECR Public catalog reads support no resource-level permissions (Service Authorization Reference): "
        "they let the build log in to the registries and pull the public base images.",
    ),
    (
        "BuildBoundary",
        f"AwsSolutions-IAM5[Resource::{_ARN.format(service='logs')}:log-group:"
        "<<logical-id:BuildLogs/Resource>>:*]",
        "Log streams are named by CodeBuild per build: the build may write streams of its own log group only.",
    ),
    (
        "BuildBoundary",
        f"AwsSolutions-IAM5[Resource::{_ARN.format(service='kms')}:key/*]",
        "kms:Decrypt only with kms:ViaService s3.<region>.amazonaws.com: S3 decrypting the build context "
        "with the CDK bootstrap bucket's key (SSE-KMS; the aws/s3 key's ID is the account's own, unknown "
        "at synth), which the boundary would otherwise deny.",
    ),
    (
        "BuildResponderRole",
        f"AwsSolutions-IAM5[Resource::{_ARN.format(service='logs')}:log-group:"
        "<<logical-id:BuildLogs/Resource>>:*]",
        "It reads the last lines of an ended build's log stream, named by CodeBuild per build, in the "
        "builds' own log group only.",
    ),
    (
        "BuildResponderRole",
        f"AwsSolutions-IAM5[Resource::{_ARN.format(service='logs')}:log-group:"
        "<<logical-id:BuildResponderLogs/Resource>>:*]",
        "Lambda names its log streams per instance: the function writes streams of its own log group only.",
    ),
)

# cdklabs-deploy-time-build's per-stack singletons (paths under the stack): the CodeBuild project's
# role and the function that starts a build. The library writes their policies; the boundary above
# caps the build role, and the function may only start this project's builds.
_PROJECT_ID = f"<<logical-id:{PROJECT_ID}/Resource>>"
IMAGE_BUILD_ACKNOWLEDGEMENTS: tuple[tuple[str, str, str], ...] = (
    (
        f"{PROJECT_ID}/Role",
        _managed("AmazonElasticContainerRegistryPublicReadOnly"),
        "The library attaches it so the build can pull public base images (public.ecr.aws): read-only "
        "catalog and layer reads of public repositories." + _BOUNDED,
    ),
    *(
        (
            f"{PROJECT_ID}/Role/DefaultPolicy",
            f"AwsSolutions-IAM5[{item}]",
            "Written by cdklabs-deploy-time-build (S3 read of the asset bucket, CodeBuild's log and report "
            "groups, an ECR token) and by the key grant." + _BOUNDED,
        )
        for item in (
            "Action::kms:GenerateDataKey*",
            "Action::kms:ReEncrypt*",
            "Action::s3:GetBucket*",
            "Action::s3:GetObject*",
            "Action::s3:List*",
            "Resource::*",
            f"Resource::{_ARN.format(service='codebuild')}:report-group/{_PROJECT_ID}-*",
            f"Resource::{_ARN.format(service='logs')}:log-group:/aws/codebuild/{_PROJECT_ID}:*",
            "Resource::arn:<stack-partition>:s3:::cdk-hnb659fds-assets-<stack-account>-<stack-region>/*",
        )
    ),
    (
        f"{HANDLER_ID}/ServiceRole",
        _managed("service-role/AWSLambdaBasicExecutionRole"),
        "The library's function that starts an image build during a deployment (codebuild:StartBuild on "
        "this project only) logs with the managed basic execution policy.",
    ),
)


#: A placeholder for the logical ID of the element at a path under the owner: findings that name
#: a condition or resource by logical ID change with the ID the owner is given.
_LOGICAL_ID = re.compile(r"<logical-id:([^>]+)>")


def resolve_finding(root: IConstruct, finding: str) -> str:
    """``finding`` with each ``<logical-id:PATH>`` replaced by the logical ID of ``root``/PATH, and
    ``<stack-partition>`` / ``<stack-region>`` / ``<stack-account>`` by the stack's, as cdk-nag
    prints them: a literal (a stack whose ``env`` names it), or the pseudo parameter (an
    environment-agnostic stack or field, or partition literals off:
    ``@aws-cdk/core:enablePartitionLiterals``)."""
    return _resolve(_Finder(root), finding, _stack_fields(Stack.of(root)))


def _stack_fields(stack: Stack) -> dict[str, str]:
    """The ``<stack-...>`` placeholders of ``stack``'s findings (one lookup per owner, not per entry)."""
    partition = stack.resolve(stack.partition)
    return {
        "<stack-partition>": partition if isinstance(partition, str) else "<AWS::Partition>",
        "<stack-region>": "<AWS::Region>" if Token.is_unresolved(stack.region) else stack.region,
        "<stack-account>": "<AWS::AccountId>" if Token.is_unresolved(stack.account) else stack.account,
    }


def _resolve(constructs: _Finder, finding: str, fields: dict[str, str]) -> str:
    for placeholder, value in fields.items():
        finding = finding.replace(placeholder, value)

    def logical_id(match: re.Match[str]) -> str:
        element = constructs.construct_at(match.group(1))
        if not isinstance(element, CfnElement):
            raise LookupError(f"cdk-nag acknowledgement names {match.group(1)}, which has no logical ID")
        return str(Stack.of(constructs.root).resolve(element.logical_id))

    return _LOGICAL_ID.sub(logical_id, finding)


class _Finder:
    """The constructs at paths under ``root``, each path segment looked up once (acknowledgements
    share their owners' subtrees, and each lookup is a call into the jsii kernel)."""

    def __init__(self, root: IConstruct) -> None:
        self.root = root
        self._found: dict[str, IConstruct] = {"": root}

    def construct_at(self, path: str) -> IConstruct:
        if path in self._found:
            return self._found[path]
        parent, _, part = path.rpartition("/")
        child = self.construct_at(parent).node.try_find_child(part)
        if child is None:
            raise LookupError(f"cdk-nag acknowledgement for missing construct {self.root.node.path}/{path}")
        self._found[path] = child
        return child


class StaleAcknowledgement(ValueError):
    """An acknowledgement that matches no finding: the reason it records no longer applies."""


def findings(scope: IConstruct) -> set[tuple[str, str]]:
    """(construct path, finding id) of every finding AwsSolutions and :class:`PlatformChecks`
    report on ``scope``, ignoring no acknowledgement made later."""
    found: set[tuple[str, str]] = set()
    for pack in (AwsSolutionsChecks(), PlatformChecks()):
        found |= _report_findings(pack.validate_scope(scope))
    return found


def _report_findings(report: PolicyValidationPluginReport) -> set[tuple[str, str]]:
    return {
        (resource.construct_path or "", violation.rule_name)
        for violation in report.violations
        for resource in violation.violating_resources
    }


@dataclass(frozen=True)
class _Target:
    """One acknowledgement resolved on its construct: what must match a finding."""

    #: The construct's path (``<owner's path>/<entry's path>``): where a finding must be, at it or
    #: below, and how the error names the entry.
    where: str
    finding: str
    reason: str

    @property
    def pack(self) -> str:
        return self.finding.split("-", 1)[0]

    def matches(self, found: set[tuple[str, str]]) -> bool:
        return any(
            rule == self.finding and (path == self.where or path.startswith(self.where + "/"))
            for path, rule in found
        )


#: Acknowledgements whose check waits for the app's synth (:func:`check_acknowledgements`), per app.
_DEFERRED: weakref.WeakKeyDictionary[IConstruct, list[_Target]] = weakref.WeakKeyDictionary()


def _check(targets: list[_Target], found: set[tuple[str, str]]) -> None:
    for target in targets:
        if not target.matches(found):
            raise StaleAcknowledgement(
                f"cdk-nag acknowledgement of {target.finding} on {target.where} "
                "matches no finding: the reason it records no longer applies. This is the library's to "
                "fix, not your app's (report it with your stack's env); in the library's own tree, "
                "remove or correct the entry in trainium_eks/nag.py"
            )


def acknowledge_findings(
    root: IConstruct,
    entries: tuple[tuple[str, str, str], ...],
    *,
    check_at_synth: bool = False,
    fields: dict[str, str] | None = None,
) -> None:
    """Acknowledge ``entries`` (path under ``root``, finding, reason) on the constructs of ``root``.

    Each entry must match a finding on its construct or below; :class:`StaleAcknowledgement`
    otherwise, so a fix elsewhere (or a renamed construct) cannot leave a stale reason behind.
    The check runs cdk-nag over ``root`` now, or with ``check_at_synth`` once for the whole app
    by :func:`check_acknowledgements` (after ``app.synth()``, from the validation report of the
    :func:`nag_plugins`): the library's constructs defer it, so the packs run once per synth.
    ``fields``: more placeholders of the entries' findings and their values.
    """
    fields = {**_stack_fields(Stack.of(root)), **(fields or {})}
    base = root.node.path
    constructs = _Finder(root)
    acknowledged: dict[str, tuple[IConstruct, list[Acknowledgment]]] = {}
    targets = []
    for path, finding, reason in entries:
        target = _Target(f"{base}/{path}" if base else path, _resolve(constructs, finding, fields), reason)
        targets.append(target)
        # Findings of a validation plugin are acknowledged under the plugin's name.
        ack = Acknowledgment(id=f"{target.pack}::{target.finding}", reason=reason)
        acknowledged.setdefault(path, (constructs.construct_at(path), []))[1].append(ack)
    if check_at_synth:
        _DEFERRED.setdefault(root.node.root, []).extend(targets)
    else:
        _check(targets, findings(root))
    for construct, acks in acknowledged.values():
        Validations.of(construct).acknowledge(*acks)


#: The report aws-cdk-lib writes into the cloud assembly when the app has validation plugins:
#: ``cxapi.VALIDATION_REPORT_FILE`` (aws-cdk-lib 2.275 core/lib/private/synthesis-validation.ts,
#: ``validateTemplates``), every plugin's violations and the acknowledged ("suppressed") ones
#: with the construct paths they were found at (core/lib/validation/private/report.ts, ``formatJson``).
VALIDATION_REPORT = "validation-report.json"


def report_findings(report: dict) -> set[tuple[str, str]]:
    """(construct path, finding id) of every violation in aws-cdk-lib's validation report
    (:data:`VALIDATION_REPORT`, read as JSON), acknowledged or not."""
    return {
        (construct.get("constructPath") or "", violation["ruleName"])
        for plugin in report.get("pluginReports", [])
        for key in ("violations", "suppressedViolations")
        for violation in plugin.get(key, [])
        for construct in violation.get("violatingConstructs", [])
    }


def check_acknowledgements(app: IConstruct, assembly_dir: str | os.PathLike[str] | None = None) -> None:
    """Check every acknowledgement ``app``'s constructs deferred to synth: after ``app.synth()``,
    give the assembly's directory and the check reads the findings the :func:`nag_plugins` wrote
    into its validation report; without one (or without a report there), the packs run over
    ``app`` here. :class:`StaleAcknowledgement` on the first that matches no finding."""
    report = Path(assembly_dir) / VALIDATION_REPORT if assembly_dir is not None else None
    if report is not None and report.is_file():
        found = report_findings(json.loads(report.read_text()))
    else:
        found = findings(app)
    _check(_DEFERRED.get(app.node.root, []), found)


def nag_plugins(app: IConstruct) -> tuple[AwsSolutionsChecks, PlatformChecks]:
    """AwsSolutions and :class:`PlatformChecks` for ``Validations.of(app).add_plugins(*...)``; after
    ``app.synth()``, :func:`check_acknowledgements` reads their report."""
    return AwsSolutionsChecks(app), PlatformChecks(app)


#: Under :class:`EbsCsiDriver` (the add-on of etcd's and Prometheus's volumes).
EBS_CSI_ACKNOWLEDGEMENTS: tuple[tuple[str, str, str], ...] = (
    (
        "ControllerRole",
        _managed("service-role/AmazonEBSCSIDriverPolicy"),
        "The EBS CSI driver's controller role (EKS Pod Identity, only the ebs-csi-controller-sa "
        "service account) uses the AWS managed policy the EKS user guide prescribes; AWS keeps it "
        "current with the driver's EC2 volume calls.",
    ),
)

#: Under :class:`ObservabilityAddons`, with Container Insights on: its agent's role.
CONTAINER_INSIGHTS_ACKNOWLEDGEMENTS: tuple[tuple[str, str, str], ...] = (
    (
        "CloudWatchAgentRole",
        _managed("CloudWatchAgentServerPolicy"),
        "The CloudWatch agent of Container Insights (EKS Pod Identity, only its cloudwatch-agent "
        "service account) uses the AWS managed policy the CloudWatch documentation prescribes for "
        "publishing metrics and logs.",
    ),
)

#: Under :class:`NodeReplacementRole`: the role that terminates a Trainium node failing its check.
NODE_REPLACEMENT_ACKNOWLEDGEMENTS: tuple[tuple[str, str, str], ...] = (
    (
        "Role/DefaultPolicy",
        f"AwsSolutions-IAM5[Resource::{_ARN.format(service='ec2')}:instance/*]",
        "The node health check terminates the Trainium node that failed it, whose instance ID is "
        "known only then: ec2:TerminateInstances alone, on instances whose tags name this cluster "
        "and its Trainium nodegroup (or the Trainium NodePool), nothing else (trainium_eks/node_health.py).",
    ),
)

#: Under :class:`KarpenterController`. ``<cluster-name>``: the cluster's name as cdk-nag prints it
#: (``<LogicalId>`` of a cluster this app defines), filled in by :func:`acknowledge_own_findings`.
KARPENTER_ACKNOWLEDGEMENTS: tuple[tuple[str, str, str], ...] = (
    *(
        (
            "ControllerRole/DefaultPolicy",
            f"AwsSolutions-IAM5[Resource::{_ARN.format(service='ec2')}:{kind}/*]",
            "Karpenter names these when it launches a node, before they exist (RunInstances, CreateFleet, "
            "CreateLaunchTemplate): each statement requires the request or resource to carry this "
            "cluster's eks:eks-cluster-name tag and a karpenter.sh/nodepool tag, as Karpenter's "
            "published policy does.",
        )
        for kind in ("fleet", "instance", "volume", "network-interface", "launch-template")
    ),
    *(
        (
            "ControllerRole/DefaultPolicy",
            f"AwsSolutions-IAM5[Resource::arn:<stack-partition>:ec2:<stack-region>::{kind}/*]",
            "The EKS Neuron AMI of the pinned release and its snapshot: AWS-owned, resolved from its "
            "SSM parameter at launch, so no ID is known at synth (Karpenter's published policy).",
        )
        for kind in ("image", "snapshot")
    ),
    (
        "ControllerRole/DefaultPolicy",
        "AwsSolutions-IAM5[Resource::arn:<stack-partition>:ssm:<stack-region>::parameter/aws/service/*]",
        "Read-only: the public SSM parameters of the EKS AMIs (Karpenter resolves the AMI alias there).",
    ),
    (
        "ControllerRole/DefaultPolicy",
        "AwsSolutions-IAM5[Resource::*]",
        "EC2 Describe* calls (limited to this region by aws:RequestedRegion) and pricing:GetProducts "
        "take no resource ARN; iam:ListInstanceProfiles (read-only, as Karpenter publishes it) is "
        "called by the EC2NodeClass finalizer, which never clears without it.",
    ),
    (
        "ControllerRole/DefaultPolicy",
        "AwsSolutions-IAM5[Resource::arn:<stack-partition>:iam::<stack-account>:instance-profile/<cluster-name>_*]",
        "Read-only (iam:GetInstanceProfile): the EC2NodeClass finalizer looks up the legacy profile "
        "name <cluster>_<hash> and goes on only when it is absent; no profile of that name is made.",
    ),
    (
        "InterruptionQueue",
        "AwsSolutions-SQS3",
        "Interruption notices are read within seconds and worth nothing after 5 minutes (the "
        "queue's retention, as Karpenter publishes it): a dead-letter queue would hold messages "
        "no one reads.",
    ),
)


#: Every table of acknowledgements, by the construct that applies it (one place to read them all).
ACKNOWLEDGEMENT_TABLES: dict[str, tuple[tuple[str, str, str], ...]] = {
    "eks.Cluster": EKS_CLUSTER_ACKNOWLEDGEMENTS,
    "TrainiumCluster": TRAINIUM_CLUSTER_ACKNOWLEDGEMENTS,
    "node role": NODE_ROLE_ACKNOWLEDGEMENTS,
    "ModelBucket": MODEL_BUCKET_ACKNOWLEDGEMENTS,
    "ModelWriter": MODEL_WRITER_ACKNOWLEDGEMENTS,
    "FsxCsiVolume": FSX_CSI_ACKNOWLEDGEMENTS,
    "image builds": IMAGE_BUILD_ACKNOWLEDGEMENTS,
    "image build hardening": IMAGE_HARDENING_ACKNOWLEDGEMENTS,
    "EBS CSI": EBS_CSI_ACKNOWLEDGEMENTS,
    "Container Insights": CONTAINER_INSIGHTS_ACKNOWLEDGEMENTS,
    "node replacement": NODE_REPLACEMENT_ACKNOWLEDGEMENTS,
    "Karpenter": KARPENTER_ACKNOWLEDGEMENTS,
}


def printed_field(scope: IConstruct, placeholder: str, value: str) -> dict[str, str]:
    """``placeholder``: ``value`` as cdk-nag prints it in a finding: a literal as it is, a
    ``Ref`` as ``<LogicalId>``, any other intrinsic as its compact JSON (cdk-nag 3 flattens what
    it cannot resolve that way: a weak cross-stack reference's ``Fn::GetStackOutput``)."""
    resolved = Stack.of(scope).resolve(value)
    if isinstance(resolved, str):
        return {placeholder: resolved}
    if isinstance(resolved, dict) and set(resolved) == {"Ref"}:
        return {placeholder: f"<{resolved['Ref']}>"}
    return {placeholder: json.dumps(resolved, separators=(",", ":"))}


def cluster_name_field(cluster: eks.ICluster) -> dict[str, str]:
    """``<cluster-name>``: a cluster's name as cdk-nag prints it in a finding (``<LogicalId>`` for
    the ``Ref`` of a cluster this app defines; the name itself for an imported one)."""
    name = Stack.of(cluster).resolve(cluster.cluster_name)
    if isinstance(name, dict) and "Ref" in name:
        return {"<cluster-name>": f"<{name['Ref']}>"}
    return {"<cluster-name>": str(name)}


def acknowledge_own_findings(
    owner: IConstruct, entries: tuple[tuple[str, str, str], ...], fields: dict[str, str] | None = None
) -> None:
    """What each construct calls on itself once it has built the resources ``entries`` name:
    acknowledged now, checked against cdk-nag's findings at synth (:func:`check_acknowledgements`)."""
    acknowledge_findings(owner, entries, check_at_synth=True, fields=fields)


def acknowledge_cluster_findings(cluster: IConstruct) -> None:
    """Acknowledge aws-cdk-lib's own findings under an ``aws_eks_v2`` cluster
    (:data:`EKS_CLUSTER_ACKNOWLEDGEMENTS`: its role and kubectl provider), for a cluster of the
    app's own (:class:`TrainiumCluster` applies them to its cluster itself). Checked at synth."""
    acknowledge_own_findings(cluster, EKS_CLUSTER_ACKNOWLEDGEMENTS)


#: The attribute of a stack whose image-build findings are acknowledged.
_IMAGE_BUILDS_ACKNOWLEDGED = "_trainium_eks_image_builds_acknowledged"


def acknowledge_image_builds(owner: IConstruct) -> None:
    """What the first image build of a stack accepts: :data:`IMAGE_HARDENING_ACKNOWLEDGEMENTS` on
    ``owner`` (which holds the hardening), :data:`IMAGE_BUILD_ACKNOWLEDGEMENTS` on the image-build
    library's singletons of its stack. Checked at synth."""
    stack = Stack.of(owner)
    if getattr(stack, _IMAGE_BUILDS_ACKNOWLEDGED, False):
        raise RuntimeError(
            f"{stack.node.path}'s image builds are acknowledged already (by their first owner)"
        )
    acknowledge_findings(owner, IMAGE_HARDENING_ACKNOWLEDGEMENTS, check_at_synth=True)
    acknowledge_findings(stack, IMAGE_BUILD_ACKNOWLEDGEMENTS, check_at_synth=True)
    setattr(stack, _IMAGE_BUILDS_ACKNOWLEDGED, True)


# What cdk-nag's AwsSolutions EKS1/EKS2 check only on aws_eks clusters (their custom resource),
# checked here on the AWS::EKS::Cluster that aws_eks_v2 synthesizes: rule id suffix -> explanation.
PLATFORM_PACK = "TrainiumEks"
EKS_LOG_TYPES = ("api", "audit", "authenticator", "controllerManager", "scheduler")
PLATFORM_RULES = {
    "EKS1": "A public API endpoint must be limited to listed CIDRs (never 0.0.0.0/0 or unset).",
    "EKS2": "All five control-plane log types must be on (api, audit, authenticator, "
    "controllerManager, scheduler).",
    "EKS3": "Kubernetes secrets must be envelope-encrypted with a KMS key.",
}


def eks_cluster_problems(props: dict) -> dict[str, str]:
    """Rule suffix -> what is wrong, for the resolved properties of an AWS::EKS::Cluster."""
    problems = {}
    vpc = props.get("resourcesVpcConfig") or {}
    if vpc.get("endpointPublicAccess", True):
        cidrs = vpc.get("publicAccessCidrs") or []
        if not cidrs or any(str(c).endswith("/0") for c in cidrs):
            problems["EKS1"] = f"public endpoint open to {cidrs or 'all addresses (no CIDRs)'}"
    enabled = {
        t.get("type") for t in (props.get("logging") or {}).get("clusterLogging", {}).get("enabledTypes", [])
    }
    missing = [t for t in EKS_LOG_TYPES if t not in enabled]
    if missing:
        problems["EKS2"] = f"control-plane log types off: {', '.join(missing)}"
    encrypted = any(
        "secrets" in (e.get("resources") or []) and (e.get("provider") or {}).get("keyArn")
        for e in props.get("encryptionConfig") or []
    )
    if not encrypted:
        problems["EKS3"] = "secrets are not envelope-encrypted with a KMS key"
    return problems


@jsii.implements(IApplyRule)
class _Rule:
    """One rule application (cdk-nag's IApplyRule) for :class:`PlatformChecks`; jsii reads each
    member by its JavaScript name, hence the decorated properties."""

    def __init__(self, suffix: str, node: CfnResource, problems: dict[str, str]) -> None:
        self._suffix, self._node, self._problems = suffix, node, problems

    @property
    @jsii.member(jsii_name="ruleSuffixOverride")
    def rule_suffix_override(self) -> str:
        return self._suffix

    @property
    @jsii.member(jsii_name="explanation")
    def explanation(self) -> str:
        return PLATFORM_RULES[self._suffix]

    @property
    @jsii.member(jsii_name="info")
    def info(self) -> str:
        detail = self._problems.get(self._suffix)
        return f"{PLATFORM_PACK}-{self._suffix}: {detail or PLATFORM_RULES[self._suffix]}"

    @property
    @jsii.member(jsii_name="level")
    def level(self) -> NagMessageLevel:
        return NagMessageLevel.ERROR

    @property
    @jsii.member(jsii_name="node")
    def node(self) -> CfnResource:
        return self._node

    @jsii.member(jsii_name="rule")
    def rule(self, node: CfnResource) -> NagRuleCompliance:
        return (
            NagRuleCompliance.NON_COMPLIANT if self._suffix in self._problems else NagRuleCompliance.COMPLIANT
        )


class PlatformChecks(NagPack):
    """cdk-nag rule pack for what AwsSolutions misses on ``aws_eks_v2`` (see :data:`PLATFORM_RULES`).

    Runs at synth next to AwsSolutions: ``Validations.of(app).add_plugins(*nag_plugins(app))``.
    """

    def __init__(self, scope: IConstruct | None = None) -> None:
        super().__init__(scope)
        self._pack_name = PLATFORM_PACK

    @property
    def name(self) -> str:
        return PLATFORM_PACK

    def _check_resource(self, node: CfnResource) -> None:
        if node.cfn_resource_type != "AWS::EKS::Cluster":
            return
        props = Stack.of(node).resolve(_cluster_properties(node))
        problems = eks_cluster_problems(props)
        for suffix in PLATFORM_RULES:
            # jsii.implements makes _Rule an IApplyRule at run time; the Python protocol types its
            # members as settable attributes, which jsii's read-only properties are not.
            self._apply_rule(cast(IApplyRule, _Rule(suffix, node, problems)))


def _cluster_properties(cluster: CfnResource) -> dict:
    """The properties the rules read from an ``AWS::EKS::Cluster`` (a ``CfnCluster``), by their
    CloudFormation names in camelCase as ``Stack.resolve`` renders them."""
    return {
        "resourcesVpcConfig": getattr(cluster, "resources_vpc_config", None),
        "logging": getattr(cluster, "logging", None),
        "encryptionConfig": getattr(cluster, "encryption_config", None),
    }
