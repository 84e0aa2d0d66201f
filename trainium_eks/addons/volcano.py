"""Volcano batch scheduler (Helm chart) and the Queue that training jobs are submitted to.

Volcano's controllers, scheduler and admission webhook run on the system nodegroup (the chart's
``custom.<component>_ns`` node selectors), so they never take Trainium capacity. The chart is
installed with ``wait``: the Queue is applied only after Volcano's CRDs exist and its admission
webhook (which validates queues) answers.

The training Queue's capability is the Trainium nodegroup at its maximum size: devices, cores and
EFA interfaces per node (facts table) times ``max_nodes``, plus the nodes' vCPUs and memory. It
bounds what the queue may hold without ever being the constraint below full size; a job bigger
than the nodegroup stays pending instead of being admitted. Not reclaimable: a running gang job
must not lose pods to another queue.
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from trainium_job.errors import ConfigError
from trainium_job.instances import InstanceFacts
from trainium_job.scheduling import (
    EFA_RESOURCE,
    NEURON_RESOURCE,
    NEURONCORE_RESOURCE,
    SYSTEM_NODE_LABEL,
    TRAINING_QUEUE,
)
from trainium_job.security import namespace_manifest, pod_security_labels

from ..cluster.helm import HELM_TIMEOUT
from ..versions import AddonPin, ChartEvidence, Declared
from .addon import SYSTEM_NODES, AddOn, AddonContext
from .node_daemons import DaemonSettings, NodeDaemon, pinned_chart_daemons

QUEUE_API_VERSION = "scheduling.volcano.sh/v1beta1"
VOLCANO_NAMESPACE = "volcano-system"
#: Pod Security Admission for Volcano's namespace. The chart's scheduler, controller and admission
#: pods (volcano-sh/volcano installer/helm/chart/volcano/templates) use no host namespaces, no
#: hostPath volumes, no privileged mode and add no capabilities: they meet ``baseline``. They do
#: not all set the ``restricted`` fields (seccomp, runAsNonRoot), so that level warns and audits.
#: The chart's node agent (colocation, off by default) would not meet baseline.
VOLCANO_POD_SECURITY = pod_security_labels("baseline", warn="restricted", audit="restricted")


_VOLCANO_1_15 = Declared(
    True,
    "volcano-sh/volcano@v1.15.0:README.md:186 (Kubernetes compatibility: 'Volcano v1.15' row, ✓ down to 1.24)",
)

# volcano-sh/helm-charts: 1.15.0 is the newest chart its index lists (source: volcano-sh/volcano
# tag v1.15.0, installer/helm/chart/volcano). volcano-sh/volcano has a v1.15.1 tag
# (2026-07-30), but no index entry for chart 1.15.1 could be read; the former pin 1.15.2 has
# no tag in either repository.
#: The Volcano Helm chart.
CHART = AddonPin(
    "volcano",
    "1.15.0",
    "https://volcano-sh.github.io/helm-charts",
    ChartEvidence(
        version="1.15.0",
        created="2026-06-01T01:50:51.684557227Z",
        digest="2dd37565917a9b9929385ab4d1f6561cb04d104a993285dab266df1d6644bb3b",
        app_version="1.15.0",
        index="volcano-sh/helm-charts@be34e95:index.yaml",
    ),
    compatibility={
        "1.34": _VOLCANO_1_15,
        "1.35": _VOLCANO_1_15,
        "1.36": Declared(
            False,
            "volcano-sh/volcano@ed72c7c81:README.md:191 ('Volcano v1.15' row: '-' for Kubernetes 1.36, "
            '"the Kubernetes version has features or API objects that Volcano can\'t use"; only master is ✓)',
        ),
    },
)


#: The chart's scheduler configuration at 1.15.0 (installer/helm/chart/volcano/config/
#: volcano-scheduler.conf L1-15): actions, then plugin tiers.
SCHEDULER_ACTIONS = ("enqueue", "allocate", "backfill")
SCHEDULER_TIERS = (
    ("priority", "gang", "conformance"),
    ("overcommit", "drf", "predicates", "proportion", "nodeorder", "binpack"),
)
#: Plugins the chart's configuration gives ``enablePreemptable: false``.
_NOT_PREEMPTABLE = ("gang", "drf")


def scheduler_config(*, nodes_on_demand: bool) -> str:
    """Volcano's scheduler configuration: the chart's, without ``enqueue`` when nodes come on demand.

    With no Trainium node yet, ``overcommit`` and ``proportion`` see no Neuron capacity in the
    cluster and keep a job's PodGroup Pending, so its pods are never created and Karpenter, which
    launches nodes for pods marked unschedulable, never sees them (volcano-sh/volcano#4030;
    v1.15.0 pkg/scheduler/plugins/overcommit/overcommit.go L74-144, proportion.go L92-140). Without
    the ``enqueue`` action, ``allocate`` moves Pending PodGroups to Inqueue itself
    (pkg/scheduler/actions/allocate/allocate.go L152-164); the pods are created, Volcano marks them
    ``PodScheduled=False/Unschedulable`` (pkg/scheduler/cache/cache.go L1077-1120), Karpenter
    launches their nodes, and the NodePool's limit bounds what a job can ask for.
    """
    actions = [a for a in SCHEDULER_ACTIONS if not (nodes_on_demand and a == "enqueue")]
    lines = [f'actions: "{", ".join(actions)}"', "tiers:"]
    for tier in SCHEDULER_TIERS:
        lines.append("- plugins:")
        for plugin in tier:
            lines.append(f"  - name: {plugin}")
            if plugin in _NOT_PREEMPTABLE:
                lines.append("    enablePreemptable: false")
    return "\n".join(lines) + "\n"


def volcano_chart_values(
    *, nodes_on_demand: bool = False, node_selector: Mapping[str, str] = SYSTEM_NODE_LABEL
) -> dict:
    """Helm values of the Volcano chart: every component on the system nodes (``node_selector``);
    with nodes on demand, the scheduler configuration of :func:`scheduler_config`."""
    system = dict(node_selector)
    custom: dict = {
        "default_ns": system,
        "admission_ns": system,
        "controller_ns": system,
        "scheduler_ns": system,
    }
    if nodes_on_demand:
        custom["scheduler_config_override"] = scheduler_config(nodes_on_demand=True)
    return {"basic": {"image_pull_policy": "IfNotPresent"}, "custom": custom}


def queue_capability(facts: InstanceFacts, max_nodes: int) -> dict[str, str]:
    """Resources of ``max_nodes`` nodes of ``facts`` (zero-valued resources are left out)."""
    if max_nodes < 1:
        raise ConfigError("max_nodes", max_nodes, "the nodegroup needs at least 1 node")
    per_node = {
        "cpu": facts.vcpus,
        NEURON_RESOURCE: facts.neuron_devices,
        NEURONCORE_RESOURCE: facts.neuron_cores,
        EFA_RESOURCE: facts.efa_interfaces,
    }
    capability = {name: str(count * max_nodes) for name, count in per_node.items() if count}
    capability["memory"] = f"{facts.memory_gib * max_nodes}Gi"
    return capability


def training_queue(name: str, facts: InstanceFacts, max_nodes: int) -> dict:
    """The Volcano Queue object for training on the Trainium nodegroup."""
    return {
        "apiVersion": QUEUE_API_VERSION,
        "kind": "Queue",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "trainium-eks"}},
        "spec": {
            "weight": 1,
            "reclaimable": False,
            "capability": queue_capability(facts, max_nodes),
        },
    }


class VolcanoScheduler(Construct):
    """Volcano (pinned chart) plus the training Queue.

    Attributes:
        chart: the ``aws_eks_v2.HelmChart`` (release ``volcano`` in ``volcano-system``).
        queue: the ``KubernetesManifest`` holding the Queue; depends on ``chart``.
        queue_name: the Queue's name, for jobs' ``spec.queue``.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: eks.ICluster,
        facts: InstanceFacts,
        max_nodes: int,
        queue_name: str = TRAINING_QUEUE,
        nodes_on_demand: bool = False,
        pin: AddonPin = CHART,
        node_selector: Mapping[str, str] = SYSTEM_NODE_LABEL,
    ) -> None:
        """
        Args:
            cluster: the cluster (with a kubectl provider).
            facts: the Trainium instance type.
            max_nodes: the Trainium nodegroup's maximum size.
            queue_name: name of the training Queue. Default ``TRAINING_QUEUE`` ("training").
            nodes_on_demand: Karpenter launches the Trainium nodes for waiting pods
                (:func:`scheduler_config`). Default False.
            pin: chart, repository and version. Default: :data:`CHART`.
            node_selector: the labels of the nodes its components run on. Default
                ``SYSTEM_NODE_LABEL`` (the system nodegroup :class:`TrainiumCluster` makes).
        """
        super().__init__(scope, id)
        self.queue_name = queue_name
        # The namespace is ours, not the chart's (create_namespace), so it carries PSA labels.
        self.namespace = eks.KubernetesManifest(
            self,
            "Namespace",
            cluster=cluster,
            manifest=[namespace_manifest(VOLCANO_NAMESPACE, VOLCANO_POD_SECURITY)],
        )
        self.chart = eks.HelmChart(
            self,
            "Chart",
            cluster=cluster,
            **pin.chart_props(),
            release="volcano",
            namespace=VOLCANO_NAMESPACE,
            create_namespace=False,
            values=volcano_chart_values(nodes_on_demand=nodes_on_demand, node_selector=node_selector),
            # The Queue below needs the CRDs and the admission webhook serving. The wait runs
            # inside the kubectl handler, a Lambda function capped at 15 minutes in all.
            wait=True,
            timeout=HELM_TIMEOUT,
        )
        self.chart.node.add_dependency(self.namespace)
        self.queue = eks.KubernetesManifest(
            self,
            "TrainingQueue",
            cluster=cluster,
            manifest=[training_queue(queue_name, facts, max_nodes)],
        )
        self.queue.node.add_dependency(self.chart)


def _build(context: AddonContext) -> VolcanoScheduler:
    return VolcanoScheduler(
        context.scope,
        "Volcano",
        cluster=context.cluster,
        facts=context.trainium.facts,
        max_nodes=context.max_nodes,
        queue_name=context.queue_name,
        nodes_on_demand=context.nodes_on_demand,
        node_selector=context.system_node_selector,
    )


def _daemons(settings: DaemonSettings) -> list[NodeDaemon]:
    # None (node_daemons.CHARTS_OFF_TRAINIUM), but an error if our values turn its agent on.
    return pinned_chart_daemons(CHART, volcano_chart_values(), settings.facts.name)


#: Always on; its pods run on the system nodes (the Queue comes after its CRDs and webhook).
ADDON = AddOn(
    name="volcano",
    key=None,
    pins={"volcano": CHART},
    after=(SYSTEM_NODES,),
    build=_build,
    dependents=lambda scheduler: (scheduler.chart,),
    daemons=_daemons,
)
