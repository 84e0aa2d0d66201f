"""Neuron device plugin (Helm chart), with the scheduler extension and node-problem-detector as options.

The device plugin advertises ``aws.amazon.com/neuron`` (devices) and ``aws.amazon.com/neuroncore``
(cores); without it no pod can request Trainium. It runs only on the Trainium nodegroup: a node
selector on its label, plus a toleration of the Neuron taint that keeps everything else away.

Options (both off by default):

* Scheduler extension: packs NeuronCores contiguously when several pods share a node. Training
  here takes whole nodes (16 devices per pod) through Volcano, which the extension does not serve,
  and the chart's own kube-scheduler image (1.31) is far outside the version-skew policy of a 1.35
  control plane. When on, its two Deployments run on the system nodegroup.
* Node-problem-detector: a privileged DaemonSet reporting a ``NeuronHealth`` node condition. The
  EKS node monitoring agent (see :mod:`.observability`) already reports Neuron device errors as
  ``AcceleratedHardwareReady`` and drives the nodegroups' auto-repair; NPD's own recovery agent
  stays off when NPD is on, so two controllers never replace the same node.

The chart's values keys are those of aws-neuron/neuron-helm-charts (``devicePlugin``,
``scheduler``, ``npd``, ``draDriver``); Helm replaces lists, so the tolerations given here are the
complete set.
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from trainium_job.scheduling import DEVICE_PLUGIN_TOLERATION, SYSTEM_NODE_LABEL, TRAINIUM_NODE_LABEL

from ..cluster.helm import HELM_TIMEOUT
from ..nodes.health_checks import PENDING_TOLERATION
from ..versions import AddonPin, ChartEvidence, Declared
from .addon import TRAINIUM_CAPACITY, AddOn, AddonContext
from .node_daemons import DaemonSettings, NodeDaemon, pinned_chart_daemons

_DECLARED = Declared(
    True,
    "neuron-helm-chart 1.10.0 declares no kubeVersion; EKS User Guide, 'Manage Neuron devices on Amazon "
    "EKS': the device plugin remains supported (its optional scheduler extension bundles kube-scheduler "
    "v1.31.12 and stays off)",
)

# aws-neuron/neuron-helm-charts release 1.10.0 (2026-08-19): device plugin 2.32.0.0. The
# chart follows Neuron SDK releases (1.9.0 = SDK 2.31); the device plugin talks to the
# node's driver, not to the container's Neuron runtime.
#: The Neuron Helm chart.
CHART = AddonPin(
    "neuron-helm-chart",
    "1.10.0",
    "oci://public.ecr.aws/neuron/neuron-helm-chart",
    ChartEvidence(
        version="1.10.0",
        created="2026-08-19 (GitHub release 1.10.0 of aws-neuron/neuron-helm-charts, commit 8ca1e5c)",
        digest="sha256:ed5d8f73b7a05d3a1edf17b2bfaf277ea995ad1c65b115fa8ba2c7b4dc649346",
        app_version=None,
        index="`helm show values oci://public.ecr.aws/neuron/neuron-helm-chart --version 1.10.0` "
        "output with its digest, recorded in a public Trainium workshop (2026-09)",
    ),
    compatibility=dict.fromkeys(("1.34", "1.35", "1.36"), _DECLARED),
)


def neuron_chart_values(
    *,
    scheduler_extension: bool,
    node_problem_detector: bool,
    health_check: bool = False,
    system_node_selector: Mapping[str, str] = SYSTEM_NODE_LABEL,
) -> dict:
    """Helm values of the Neuron chart (device plugin on Trainium nodes only, the scheduler
    extension on the nodes ``system_node_selector`` picks). With
    ``health_check``, the device plugin also tolerates the node health check's pending taint:
    the check requests the node's Neuron devices, which only the plugin allocates."""
    trainium_only = {
        "nodeSelector": dict(TRAINIUM_NODE_LABEL),
        "tolerations": [dict(DEVICE_PLUGIN_TOLERATION)],
    }
    device_plugin = {
        **trainium_only,
        "tolerations": [
            dict(DEVICE_PLUGIN_TOLERATION),
            *([dict(PENDING_TOLERATION)] if health_check else []),
        ],
    }
    return {
        "devicePlugin": {"enabled": True, **device_plugin},
        "scheduler": {
            "enabled": scheduler_extension,
            "nodeSelector": dict(system_node_selector),
            "customScheduler": {"nodeSelector": dict(system_node_selector)},
        },
        "npd": {
            "enabled": node_problem_detector,
            # The chart no longer creates its default "neuron-healthcheck-system" namespace.
            "namespaceOverride": "kube-system",
            "nodeRecovery": {"enabled": False},
            **trainium_only,
        },
        # The DRA driver cannot share a node with the device plugin.
        "draDriver": {"enabled": False},
    }


class NeuronDevicePlugin(Construct):
    """The Neuron Helm chart, pinned, installed after the Trainium nodegroup exists.

    Attributes:
        chart: the ``aws_eks_v2.HelmChart`` (release ``neuron`` in ``kube-system``).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: eks.ICluster,
        scheduler_extension: bool = False,
        node_problem_detector: bool = False,
        health_check: bool = False,
        pin: AddonPin = CHART,
        system_node_selector: Mapping[str, str] = SYSTEM_NODE_LABEL,
    ) -> None:
        """
        Args:
            cluster: the cluster (with a kubectl provider).
            scheduler_extension: install the Neuron scheduler extension. Default False.
            node_problem_detector: install the Neuron node-problem-detector (monitor only).
                Default False.
            health_check: the device plugin tolerates the node health check's pending taint
                (:mod:`trainium_eks.nodes.health_checks`). Default False.
            pin: chart and version. Default: :data:`CHART`.
            system_node_selector: the labels of the nodes the scheduler extension runs on.
                Default ``SYSTEM_NODE_LABEL`` (the system nodegroup :class:`TrainiumCluster` makes).
        """
        super().__init__(scope, id)
        self.chart = eks.HelmChart(
            self,
            "Chart",
            cluster=cluster,
            # An OCI chart: the handler pulls `repository` (the full reference) at `version`.
            **pin.chart_props(),
            release="neuron",
            namespace="kube-system",
            create_namespace=False,
            values=neuron_chart_values(
                scheduler_extension=scheduler_extension,
                node_problem_detector=node_problem_detector,
                health_check=health_check,
                system_node_selector=system_node_selector,
            ),
            timeout=HELM_TIMEOUT,
        )


def _build(context: AddonContext) -> NeuronDevicePlugin:
    return NeuronDevicePlugin(
        context.scope,
        "Neuron",
        cluster=context.cluster,
        scheduler_extension=context.neuron_scheduler_extension,
        node_problem_detector=context.neuron_node_problem_detector,
        health_check=context.health_check,
        system_node_selector=context.system_node_selector,
    )


def _daemons(settings: DaemonSettings) -> list[NodeDaemon]:
    values = neuron_chart_values(
        scheduler_extension=False, node_problem_detector=settings.neuron_node_problem_detector
    )
    return pinned_chart_daemons(CHART, values, settings.facts.name)


#: Always on; after the Trainium nodes (it runs only there).
ADDON = AddOn(
    name="neuron",
    key=None,
    pins={"neuron": CHART},
    after=(TRAINIUM_CAPACITY,),
    build=_build,
    dependents=lambda plugin: (plugin.chart,),
    daemons=_daemons,
)
