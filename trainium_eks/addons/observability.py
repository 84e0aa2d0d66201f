"""EKS managed add-ons that watch the cluster: pod identity agent, node monitoring agent, and
(optionally) CloudWatch Container Insights.

* ``eks-pod-identity-agent``: hands AWS credentials to pods with a Pod Identity association (the
  EBS CSI driver, the CloudWatch agent, jobs that read S3). Always on.
* ``eks-node-monitoring-agent``: reports kernel, network, storage and accelerator (Neuron) faults
  as node conditions; the managed nodegroups' auto-repair replaces or reboots what it flags.
  Always on.
* ``amazon-cloudwatch-observability`` (``container_insights``, default off): Container Insights
  with Neuron (neuron-monitor) and EFA metrics, plus container logs through Fluent Bit. Off by
  default because it bills per metric and per log GB; turn it on for long or production runs. Its
  agent gets ``CloudWatchAgentServerPolicy`` through Pod Identity, not through the node role.
  Its agent and Fluent Bit run in the host network namespace, so the launch template's IMDSv2
  hop limit of 1 is enough for them.
"""

from __future__ import annotations

from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from ..cluster.managed_addons import managed_addon, pod_identity_role
from ..nag import CONTAINER_INSIGHTS_ACKNOWLEDGEMENTS, acknowledge_own_findings
from ..versions import AddonPin, Declared
from .addon import SYSTEM_NODES, AddOn, AddonContext
from .node_daemons import DaemonSettings, NodeDaemon, addon_daemons

CLOUDWATCH_AGENT_SERVICE_ACCOUNT = "cloudwatch-agent"


# EKS managed add-ons: EKS refuses a version it does not offer for the cluster's Kubernetes
# version, so each pin lists, per Kubernetes version, where it was seen offered (checked
# 2026-11: public configurations that pin the version next to that Kubernetes version's
# kube-proxy or cluster version; ``aws eks describe-addon-versions --kubernetes-version 1.35
# --addon-name <name>`` re-checks one).

#: The EKS Pod Identity agent.
POD_IDENTITY_AGENT = AddonPin(
    "eks-pod-identity-agent",
    "v1.3.10-eksbuild.3",
    compatibility={
        "1.34": Declared(
            True,
            "`aws eks describe-addon-versions --kubernetes-version 1.34` defaults of 2026-06-24 "
            "in a public Terraform configuration (with kube-proxy v1.34.6-eksbuild.11)",
        ),
        "1.35": Declared(
            True,
            "public Terraform configuration pinning it with kube-proxy v1.35.3-eksbuild.13",
        ),
        "1.36": Declared(
            True,
            "add-on versions a 1.36 cluster resolved to (public deployment record, 2026)",
        ),
    },
    managed=True,
)

#: The EKS node monitoring agent.
NODE_MONITORING_AGENT = AddonPin(
    "eks-node-monitoring-agent",
    "v1.6.6-eksbuild.1",
    compatibility={
        "1.35": Declared(
            True,
            "add-on compatibility table of a public 1.35 deployment (kube-proxy v1.35.3-eksbuild.2)",
        ),
        "1.36": Declared(
            True,
            "public Terraform configuration with cluster_version 1.36 (defaultVersion query)",
        ),
    },
    managed=True,
)

# v6.2.0-eksbuild.1: pinned next to kube-proxy v1.36.0-eksbuild.9 in a public EKS 1.36
# configuration (2026), and for 1.30-1.35 in a public CDK configuration. The former
# v4.10.3-eksbuild.1 predates 1.36.
#: CloudWatch Container Insights.
CLOUDWATCH_OBSERVABILITY = AddonPin(
    "amazon-cloudwatch-observability",
    "v6.2.0-eksbuild.1",
    compatibility={
        "1.34": Declared(
            True,
            "public CDK (aws_eks_v2) configuration pinning it for KubernetesVersion.V1_34 with "
            "kube-proxy v1.34.6-eksbuild.13",
        ),
        "1.35": Declared(
            True,
            "the same configuration, for KubernetesVersion.V1_35 with kube-proxy v1.35.3-eksbuild.13",
        ),
        "1.36": Declared(
            True,
            "public Terraform configuration pinning it with kube-proxy v1.36.0-eksbuild.9",
        ),
    },
    managed=True,
)


class ObservabilityAddons(Construct):
    """Pod identity agent, node monitoring agent and optional Container Insights.

    Attributes:
        pod_identity_agent: the ``eks-pod-identity-agent`` add-on.
        node_monitoring_agent: the ``eks-node-monitoring-agent`` add-on.
        cloudwatch: the ``amazon-cloudwatch-observability`` add-on, or None.
        cloudwatch_role: its Pod Identity role, or None.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: eks.ICluster,
        container_insights: bool = False,
    ) -> None:
        """
        Args:
            cluster: the cluster.
            container_insights: install CloudWatch Container Insights. Default False.
        """
        super().__init__(scope, id)
        self.pod_identity_agent = managed_addon(
            self, "PodIdentityAgent", cluster=cluster, pin=POD_IDENTITY_AGENT
        )
        self.node_monitoring_agent = managed_addon(
            self, "NodeMonitoringAgent", cluster=cluster, pin=NODE_MONITORING_AGENT
        )
        self.cloudwatch = None
        self.cloudwatch_role = None
        if container_insights:
            self.cloudwatch_role = pod_identity_role(
                self,
                "CloudWatchAgentRole",
                managed_policy="CloudWatchAgentServerPolicy",
                description="CloudWatch agent of Container Insights (EKS Pod Identity)",
            )
            acknowledge_own_findings(self, CONTAINER_INSIGHTS_ACKNOWLEDGEMENTS)
            self.cloudwatch = managed_addon(
                self,
                "CloudWatch",
                cluster=cluster,
                pin=CLOUDWATCH_OBSERVABILITY,
                pod_identity=(CLOUDWATCH_AGENT_SERVICE_ACCOUNT, self.cloudwatch_role),
            )
            # Its Pod Identity association only works once the agent serves credentials.
            self.cloudwatch.node.add_dependency(self.pod_identity_agent)


def _build(context: AddonContext) -> ObservabilityAddons:
    return ObservabilityAddons(
        context.scope, "Observability", cluster=context.cluster, container_insights=context.container_insights
    )


def _daemons(settings: DaemonSettings) -> list[NodeDaemon]:
    pins = [POD_IDENTITY_AGENT, NODE_MONITORING_AGENT]
    if settings.container_insights:
        pins.append(CLOUDWATCH_OBSERVABILITY)
    return [daemon for pin in pins for daemon in addon_daemons(pin)]


#: The pod identity agent comes before the nodes (they need it for the VPC CNI's credentials; the
#: stack orders the nodegroups after it); the rest runs on the system nodes.
ADDON = AddOn(
    name="observability",
    key=None,
    pins={
        "pod-identity-agent": POD_IDENTITY_AGENT,
        "node-monitoring-agent": NODE_MONITORING_AGENT,
        "cloudwatch-observability": CLOUDWATCH_OBSERVABILITY,
    },
    after=(SYSTEM_NODES,),
    build=_build,
    dependents=lambda addons: (addons.node_monitoring_agent, addons.cloudwatch),
    daemons=_daemons,
)
