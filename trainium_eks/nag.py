"""cdk-nag: the one place where AwsSolutions findings are acknowledged, each with its reason.

Each entry names the construct (path under the stack), the exact finding and why the platform
accepts it. A path that no longer exists is an error, so a stale entry cannot hide.
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, Stack, Validations
from constructs import IConstruct


def _managed(policy: str) -> str:
    return f"AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{policy}]"


_NODE_ROLE_POLICIES = ("AmazonEKSWorkerNodePolicy", "AmazonEKS_CNI_Policy",
                       "AmazonEC2ContainerRegistryReadOnly")
_NODE_ROLE_REASON = ("EKS managed nodegroups require these AWS managed policies on the node role "
                     "(EKS user guide, 'Amazon EKS node IAM role'); AWS keeps them least-privilege "
                     "for the kubelet, the VPC CNI and image pulls.")
_KUBECTL = "Cluster/Cluster/KubectlProvider"
_KUBECTL_REASON = ("The kubectl provider is aws-cdk-lib's own custom resource; its roles, policies "
                   "and runtime are set by the library and only run during deployments.")

#: (construct path under the stack, finding id, reason)
ACKNOWLEDGEMENTS: tuple[tuple[str, str, str], ...] = (
    *((path, _managed(policy), _NODE_ROLE_REASON)
      for path in ("Cluster/SystemNodes/NodeGroupRole", "Trainium/Nodegroup/NodeGroupRole")
      for policy in _NODE_ROLE_POLICIES),
    ("Cluster/Cluster/Role", _managed("AmazonEKSClusterPolicy"),
     "The EKS cluster role needs AmazonEKSClusterPolicy; EKS defines no narrower policy."),
    (f"{_KUBECTL}/Handler/ServiceRole", _managed("service-role/AWSLambdaBasicExecutionRole"), _KUBECTL_REASON),
    (f"{_KUBECTL}/Handler/ServiceRole", _managed("service-role/AWSLambdaVPCAccessExecutionRole"), _KUBECTL_REASON),
    (f"{_KUBECTL}/Handler/ServiceRole", _managed("AmazonEC2ContainerRegistryReadOnly"), _KUBECTL_REASON),
    (f"{_KUBECTL}/Handler/ServiceRole",
     'AwsSolutions-IAM4[Policy::{"Fn::If":["ClusterKubectlProviderHandlerHasEcrPublic6FE395CA",'
     '{"Fn::Join":["",["arn:",{"Ref":"AWS::Partition"},":iam::aws:policy/'
     'AmazonElasticContainerRegistryPublicReadOnly"]]},{"Ref":"AWS::NoValue"}]}]',
     _KUBECTL_REASON + " ECR Public read is only attached when a chart comes from ECR Public."),
    (f"{_KUBECTL}/Handler", "AwsSolutions-L1", _KUBECTL_REASON),
    (f"{_KUBECTL}/Provider/framework-onEvent/ServiceRole",
     _managed("service-role/AWSLambdaBasicExecutionRole"), _KUBECTL_REASON),
    (f"{_KUBECTL}/Provider/framework-onEvent/ServiceRole",
     _managed("service-role/AWSLambdaVPCAccessExecutionRole"), _KUBECTL_REASON),
    (f"{_KUBECTL}/Provider/framework-onEvent/ServiceRole/DefaultPolicy",
     "AwsSolutions-IAM5[Resource::<ClusterKubectlProviderHandler93C0312D.Arn>:*]",
     _KUBECTL_REASON + " The wildcard covers the versions of that one handler function."),
    # [storage] entries go here.
    ("StorageVolume/ControllerRole/DefaultPolicy", "AwsSolutions-IAM5[Resource::*]",
     "The FSx CSI controller's only permission is fsx:DescribeFileSystems (read-only; static "
     "volumes need no create/delete), and that action supports no resource-level permissions "
     "(Service Authorization Reference, Amazon FSx), so it can only be granted on '*'."),
    # [addons] entries go here.
    # Scoped to "Addons" (always present) because each role exists only when its option is on
    # (etcd_enabled, container_insights), and an entry for a missing path is an error here.
    ("Addons", _managed("service-role/AmazonEBSCSIDriverPolicy"),
     "The EBS CSI driver's controller role (EKS Pod Identity, only the ebs-csi-controller-sa "
     "service account) uses the AWS managed policy the EKS user guide prescribes; AWS keeps it "
     "current with the driver's EC2 volume calls."),
    ("Addons", _managed("CloudWatchAgentServerPolicy"),
     "The CloudWatch agent of Container Insights (EKS Pod Identity, only its cloudwatch-agent "
     "service account) uses the AWS managed policy the CloudWatch documentation prescribes for "
     "publishing metrics and logs."),
    # [training] entries: in TRAINING_ACKNOWLEDGEMENTS below (applied only when the job is on).
)

# [training] The image copy into ECR (cdk-ecr-deployment's singleton function, at the stack root;
# its id is the library's fixed UUID + memory size). Applied by stacks/training.py.
_ECR_DEPLOYMENT = "Custom::CDKECRDeploymentbd07c930edb94112a20f03f096f53666512MiB"
_ECR_DEPLOYMENT_REASON = ("cdk-ecr-deployment's copy function (the library's own singleton Lambda) "
                          "runs only during deployments to copy the built training images into the "
                          "platform's ECR repository; its role and policy are set by the library.")
TRAINING_ACKNOWLEDGEMENTS: tuple[tuple[str, str, str], ...] = (
    (f"{_ECR_DEPLOYMENT}/ServiceRole", _managed("service-role/AWSLambdaBasicExecutionRole"),
     _ECR_DEPLOYMENT_REASON),
    (f"{_ECR_DEPLOYMENT}/ServiceRole/DefaultPolicy", "AwsSolutions-IAM5[Resource::*]",
     _ECR_DEPLOYMENT_REASON + " ecr:GetAuthorizationToken supports no resource-level permissions, "
     "and the library grants its image read/push actions on '*' (it copies between any repositories)."),
)


def _find(stack: Stack, path: str) -> IConstruct:
    node: IConstruct = stack
    for part in path.split("/"):
        child = node.node.try_find_child(part)
        if child is None:
            raise LookupError(f"cdk-nag acknowledgement for missing construct {stack.node.path}/{path}")
        node = child
    return node


def acknowledge_findings(stack: Stack, entries: tuple[tuple[str, str, str], ...]) -> None:
    """Acknowledge ``entries`` (path, finding, reason) on the constructs of ``stack``."""
    for path, finding, reason in entries:
        # Findings of a validation plugin are acknowledged under the plugin's name.
        Validations.of(_find(stack, path)).acknowledge(
            Acknowledgment(id=f"AwsSolutions::{finding}", reason=reason)
        )


def suppress_platform_findings(stack: Stack) -> None:
    """Acknowledge the findings the platform accepts by design (see :data:`ACKNOWLEDGEMENTS`)."""
    acknowledge_findings(stack, ACKNOWLEDGEMENTS)
