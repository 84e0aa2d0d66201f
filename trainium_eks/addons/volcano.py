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

from ..versions import ADDON_PINS, AddonPin
from .helm import HELM_TIMEOUT

QUEUE_API_VERSION = "scheduling.volcano.sh/v1beta1"
VOLCANO_NAMESPACE = "volcano-system"
#: Pod Security Admission for Volcano's namespace. The chart's scheduler, controller and admission
#: pods (volcano-sh/volcano installer/helm/chart/volcano/templates) use no host namespaces, no
#: hostPath volumes, no privileged mode and add no capabilities: they meet ``baseline``. They do
#: not all set the ``restricted`` fields (seccomp, runAsNonRoot), so that level warns and audits.
#: The chart's node agent (colocation, off by default) would not meet baseline.
VOLCANO_POD_SECURITY = pod_security_labels("baseline", warn="restricted", audit="restricted")


def volcano_chart_values() -> dict:
    """Helm values of the Volcano chart: every component on the system nodegroup."""
    system = dict(SYSTEM_NODE_LABEL)
    return {
        "basic": {"image_pull_policy": "IfNotPresent"},
        "custom": {
            "default_ns": system,
            "admission_ns": system,
            "controller_ns": system,
            "scheduler_ns": system,
        },
    }


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
        pin: AddonPin = ADDON_PINS["volcano"],
    ) -> None:
        """
        Args:
            cluster: the cluster (with a kubectl provider).
            facts: the Trainium instance type.
            max_nodes: the Trainium nodegroup's maximum size.
            queue_name: name of the training Queue. Default ``TRAINING_QUEUE`` ("training").
            pin: chart, repository and version. Default: ``ADDON_PINS["volcano"]``.
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
            values=volcano_chart_values(),
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
