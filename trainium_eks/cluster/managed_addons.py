"""Helpers for EKS managed add-ons: a pinned ``aws_eks_v2.Addon`` and its Pod Identity role."""

from __future__ import annotations

from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from ..arguments import AnyCluster
from ..escape_hatch import l1
from ..versions import AddonPin

#: The EKS Pod Identity service principal (EKS user guide, "Pod Identity": the role's trust policy).
POD_IDENTITY_PRINCIPAL = "pods.eks.amazonaws.com"


def pod_identity_role(
    scope: Construct, id: str, *, description: str, managed_policy: str | None = None
) -> iam.Role:
    """A role EKS Pod Identity can assume (and tag the session of).

    Args:
        managed_policy: the one AWS managed policy it holds. Default None: none (the caller adds
            its own statements).
    """
    return iam.Role(
        scope,
        id,
        assumed_by=iam.SessionTagsPrincipal(iam.ServicePrincipal(POD_IDENTITY_PRINCIPAL)),
        managed_policies=(
            None
            if managed_policy is None
            else [iam.ManagedPolicy.from_aws_managed_policy_name(managed_policy)]
        ),
        description=description,
    )


def pod_identity_association(
    scope: Construct,
    id: str,
    *,
    cluster: AnyCluster,
    namespace: str,
    service_account: str,
    role: iam.IRole,
) -> eks.CfnPodIdentityAssociation:
    """The EKS Pod Identity association that gives ``namespace/service_account`` the ``role``
    (for a service account that no managed add-on owns: see :func:`managed_addon` for those)."""
    return eks.CfnPodIdentityAssociation(
        scope,
        id,
        cluster_name=cluster.cluster_name,
        namespace=namespace,
        service_account=service_account,
        role_arn=role.role_arn,
    )


def managed_addon(
    scope: Construct,
    id: str,
    *,
    cluster: eks.ICluster,
    pin: AddonPin,
    pod_identity: tuple[str, iam.IRole] | None = None,
    configuration: dict | None = None,
) -> eks.Addon:
    """A pinned EKS managed add-on whose software leaves the cluster with the stack.

    ``pod_identity`` is (service account, role): EKS creates that association with the add-on.
    """
    addon = eks.Addon(
        scope,
        id,
        cluster=cluster,
        addon_name=pin.name,
        addon_version=pin.version,
        configuration_values=configuration,
        preserve_on_delete=False,
    )
    if pod_identity is not None:
        service_account, role = pod_identity
        # The L2 has no property for it (aws-cdk-lib 2.275); the L1 does.
        cfn = l1(addon, eks.CfnAddon)
        cfn.pod_identity_associations = [
            eks.CfnAddon.PodIdentityAssociationProperty(
                role_arn=role.role_arn, service_account=service_account
            ),
        ]
    return addon
