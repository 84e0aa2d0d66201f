"""EFA device plugin (Helm chart ``aws-efa-k8s-device-plugin`` from aws/eks-charts).

It advertises ``vpc.amazonaws.com/efa``. It must run only where EFA devices exist, or it
crash-loops: a node selector on the Trainium nodegroup's label and instance type, plus a
toleration of the Neuron taint. The chart's own affinity (its list of EFA instance types) still
applies. Instance types without EFA (trn1.2xlarge) get no chart at all (see
:class:`~trainium_eks.addons.trainium_addons.TrainiumAddons`).

Values keys (``nodeSelector``, ``tolerations``) are those of the chart; its ``CriticalAddonsOnly``
toleration is built in, the list given here is appended to it.
"""

from __future__ import annotations

from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from trainium_job.errors import ConfigError
from trainium_job.instances import InstanceFacts
from trainium_job.scheduling import DEVICE_PLUGIN_TOLERATION, INSTANCE_TYPE_LABEL, TRAINIUM_NODE_LABEL

from ..cluster.helm import HELM_TIMEOUT
from ..nodes.health_checks import PENDING_TOLERATION
from ..versions import AddonPin, ChartEvidence, Declared
from .addon import TRAINIUM_CAPACITY, AddOn, AddonContext
from .node_daemons import DaemonSettings, NodeDaemon, pinned_chart_daemons

_DECLARED = Declared(
    True,
    "aws/eks-charts@bfe91c4:stable/aws-efa-k8s-device-plugin/Chart.yaml declares no kubeVersion; EKS "
    "User Guide, 'Manage EFA devices on Amazon EKS': the device plugin runs on all EKS-supported versions",
)

# aws/eks-charts, stable/aws-efa-k8s-device-plugin: chart v0.5.30 = image v0.5.20 (commit
# bfe91c4, 2026-07-21, "add latest EFA instance types"), the newest chart in the index; its
# instance list includes trn1.32xlarge, trn1n.32xlarge, trn2.48xlarge. (The former pin
# v0.5.32 appears in no index or tag of the repository.)
#: The EFA device plugin's Helm chart.
CHART = AddonPin(
    "aws-efa-k8s-device-plugin",
    "v0.5.30",
    "https://aws.github.io/eks-charts",
    ChartEvidence(
        version="v0.5.30",
        # The index was regenerated on 2026-08-03: every entry carries that time.
        created="2026-08-03T22:57:26.17434684Z",
        digest="43b3d666f81a40b7f7ac88ee04a64954abaaa061b1e5f54dc7ce4beb3374e32a",
        app_version="v0.5.20",
        index="aws/eks-charts@c7f9ea5:index.yaml (branch gh-pages)",
    ),
    compatibility=dict.fromkeys(("1.34", "1.35", "1.36"), _DECLARED),
)


def efa_chart_values(facts: InstanceFacts, *, health_check: bool = False) -> dict:
    """Helm values of the EFA chart: Trainium nodes of ``facts.name`` only. With
    ``health_check``, it also tolerates the node health check's pending taint, so the node's EFA
    interfaces are registered by the time the check lifts the taint."""
    return {
        "nodeSelector": {**TRAINIUM_NODE_LABEL, INSTANCE_TYPE_LABEL: facts.name},
        "tolerations": [
            dict(DEVICE_PLUGIN_TOLERATION),
            *([dict(PENDING_TOLERATION)] if health_check else []),
        ],
    }


class EfaDevicePlugin(Construct):
    """The EFA device plugin chart, pinned, installed after the Trainium nodegroup exists.

    Attributes:
        chart: the ``aws_eks_v2.HelmChart`` (release ``efa`` in ``kube-system``).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: eks.ICluster,
        facts: InstanceFacts,
        health_check: bool = False,
        pin: AddonPin = CHART,
    ) -> None:
        """
        Args:
            cluster: the cluster (with a kubectl provider).
            facts: the Trainium instance type; it must have EFA interfaces.
            health_check: it tolerates the node health check's pending taint
                (:mod:`trainium_eks.nodes.health_checks`). Default False.
            pin: chart, repository and version. Default: :data:`CHART`.
        """
        super().__init__(scope, id)
        if not facts.multi_node:
            raise ConfigError(
                "facts",
                facts.name,
                f"{facts.name} has no EFA interfaces; the EFA device plugin would crash-loop there, leave it out",
            )
        self.chart = eks.HelmChart(
            self,
            "Chart",
            cluster=cluster,
            **pin.chart_props(),
            release="efa",
            namespace="kube-system",
            create_namespace=False,
            values=efa_chart_values(facts, health_check=health_check),
            timeout=HELM_TIMEOUT,
        )


def _build(context: AddonContext) -> EfaDevicePlugin:
    return EfaDevicePlugin(
        context.scope,
        "Efa",
        cluster=context.cluster,
        facts=context.trainium.facts,
        health_check=context.health_check,
    )


def _daemons(settings: DaemonSettings) -> list[NodeDaemon]:
    if not settings.facts.multi_node:
        return []
    return pinned_chart_daemons(CHART, efa_chart_values(settings.facts), settings.facts.name)


#: On instance types with EFA (no setting); after the Trainium nodes (it runs only there).
ADDON = AddOn(
    name="efa",
    key=None,
    pins={"efa": CHART},
    after=(TRAINIUM_CAPACITY,),
    build=_build,
    enabled=lambda context: context.trainium.facts.multi_node,
    dependents=lambda plugin: (plugin.chart,),
    daemons=_daemons,
)
