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
from ..versions import ADDON_PINS
from .addon import SYSTEM_NODES, AddOn, AddonContext
from .node_daemons import DaemonSettings, NodeDaemon, addon_daemons

CLOUDWATCH_AGENT_SERVICE_ACCOUNT = "cloudwatch-agent"


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
            self, "PodIdentityAgent", cluster=cluster, pin=ADDON_PINS["pod-identity-agent"]
        )
        self.node_monitoring_agent = managed_addon(
            self, "NodeMonitoringAgent", cluster=cluster, pin=ADDON_PINS["node-monitoring-agent"]
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
            self.cloudwatch = managed_addon(
                self,
                "CloudWatch",
                cluster=cluster,
                pin=ADDON_PINS["cloudwatch-observability"],
                pod_identity=(CLOUDWATCH_AGENT_SERVICE_ACCOUNT, self.cloudwatch_role),
            )
            # Its Pod Identity association only works once the agent serves credentials.
            self.cloudwatch.node.add_dependency(self.pod_identity_agent)


def _build(context: AddonContext) -> ObservabilityAddons:
    return ObservabilityAddons(
        context.scope, "Observability", cluster=context.cluster, container_insights=context.container_insights
    )


def _daemons(settings: DaemonSettings) -> list[NodeDaemon]:
    keys = ["pod-identity-agent", "node-monitoring-agent"]
    if settings.container_insights:
        keys.append("cloudwatch-observability")
    return [daemon for key in keys for daemon in addon_daemons(ADDON_PINS[key])]


#: The pod identity agent comes before the nodes (they need it for the VPC CNI's credentials; the
#: stack orders the nodegroups after it); the rest runs on the system nodes.
ADDON = AddOn(
    name="observability",
    key=None,
    pins=("pod-identity-agent", "node-monitoring-agent", "cloudwatch-observability"),
    after=(SYSTEM_NODES,),
    build=_build,
    dependents=lambda addons: (addons.node_monitoring_agent, addons.cloudwatch),
    daemons=_daemons,
)
