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
    # [addons] entries go here.
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
