"""Amazon Managed Service for Prometheus: a workspace the platform's Prometheus writes to.

Off by default (``monitoring_amp_remote_write``). When on, the in-cluster Prometheus keeps its
local copy (the provisioned Grafana reads it) and also remote-writes every sample to an
``AWS::APS::Workspace`` (the aws_cdk.aws_aps L1: aws-cdk-lib 2.275 has no L2), where it outlives
the cluster (AMP's default retention is 150 days) and Amazon Managed Grafana can read it.

Credentials: EKS Pod Identity, no keys and no IRSA annotation. A role trusted by
``pods.eks.amazonaws.com`` may only ``aps:RemoteWrite`` to this workspace (the action AWS's
``AmazonPrometheusRemoteWriteAccess`` grants, here on one resource), associated with the
Prometheus service account. Prometheus signs with SigV4 from the AWS SDK's default credential
chain (prometheus/sigv4 ``sigv4.go``: ``config.LoadDefaultConfig``; Prometheus v3.14.0 ships it
with aws-sdk-go-v2), whose container credential provider serves Pod Identity ("Use pod identity
with the AWS SDK", EKS user guide: Go v2 from release-2023-11-14).

The remote-write URL is the workspace's endpoint (``…/workspaces/<id>/api/v1/``, the
``PrometheusEndpoint`` attribute) plus ``remote_write`` (AMP user guide, "Find your workspace
details").
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Fn, Stack
from aws_cdk import aws_aps as aps
from aws_cdk import aws_iam as iam
from constructs import Construct

from ..arguments import AnyCluster, require_cluster
from ..cluster.managed_addons import pod_identity_association, pod_identity_role


class AmpRemoteWrite(Construct):
    """An AMP workspace, and write access to it for one Kubernetes service account.

    Attributes:
        workspace: the ``CfnWorkspace``.
        role: the Pod Identity role (``aps:RemoteWrite`` on the workspace only).
        association: the ``CfnPodIdentityAssociation`` of the service account.
        remote_write_url: the workspace's remote-write endpoint (a token).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: AnyCluster,
        namespace: str,
        service_account: str,
        alias: str,
    ) -> None:
        """
        Args:
            cluster: the cluster whose pods write.
            namespace: the service account's namespace.
            service_account: the writer's service account (Prometheus's).
            alias: the workspace's alias (shown in the AMP console).
        """
        super().__init__(scope, id)
        cluster = require_cluster(cluster)
        self.workspace = aps.CfnWorkspace(self, "Workspace", alias=alias)
        self.role = pod_identity_role(
            self,
            "RemoteWriteRole",
            description="Prometheus remote write to the platform's AMP workspace (EKS Pod Identity)",
        )
        self.role.add_to_policy(
            iam.PolicyStatement(actions=["aps:RemoteWrite"], resources=[self.workspace.attr_arn])
        )
        self.association = pod_identity_association(
            self,
            "PodIdentity",
            cluster=cluster,
            namespace=namespace,
            service_account=service_account,
            role=self.role,
        )
        self.remote_write_url = Fn.join("", [self.workspace.attr_prometheus_endpoint, "remote_write"])

    def remote_write(self) -> dict[str, Any]:
        """The ``prometheusSpec.remoteWrite`` entry: the URL, SigV4 in the stack's region."""
        return {"url": self.remote_write_url, "sigv4": {"region": Stack.of(self).region}}
