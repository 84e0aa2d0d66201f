"""Where Kubernetes puts the platform's pods: node labels, the Trainium taint and its tolerations,
extended-resource names, the training namespace and queue. Each fact is written here once.
"""

from __future__ import annotations

from typing import Final

#: Key of the node label that tells the platform's two nodegroups apart.
NODE_POOL_LABEL_KEY: Final = "trainium-eks/pool"
#: Node label of the system nodegroup (controllers, TensorBoard, etcd, Volcano).
SYSTEM_NODE_LABEL: Final = {NODE_POOL_LABEL_KEY: "system"}
#: Node label of the Trainium nodegroup (node selectors use it next to the instance type).
TRAINIUM_NODE_LABEL: Final = {NODE_POOL_LABEL_KEY: "trainium"}
#: Node label and taint of the nodes Karpenter launches for dataset staging
#: (``trainium_capacity=karpenter``): the taint keeps every other pod off them, so they go as
#: soon as staging ends. The preparation nodes carry the same taint.
DATASET_NODE_LABEL: Final = {NODE_POOL_LABEL_KEY: "dataset"}
#: Node label of the CPU nodes Karpenter launches for the dataset preparation pods
#: (``trainium_capacity=karpenter`` with ``preparation_enabled``), tainted with :data:`DATASET_TAINT`.
PREPARATION_NODE_LABEL: Final = {NODE_POOL_LABEL_KEY: "preparation"}
DATASET_TAINT: Final = {"key": "trainium-eks/dataset", "value": "true", "effect": "NoSchedule"}
DATASET_TOLERATION: Final = {
    "key": DATASET_TAINT["key"],
    "operator": "Equal",
    "value": DATASET_TAINT["value"],
    "effect": DATASET_TAINT["effect"],
}
#: Well-known label the kubelet sets to the EC2 instance type.
INSTANCE_TYPE_LABEL: Final = "node.kubernetes.io/instance-type"

#: Taint that keeps everything but Trainium work (and the Neuron/EFA daemons) off Trainium nodes.
NEURON_TAINT_KEY: Final = "aws.amazon.com/neuron"
NEURON_TAINT: Final = {"key": NEURON_TAINT_KEY, "value": "true", "effect": "NoSchedule"}
#: Toleration of training pods, and of staging and data-preparation pods on the Trainium nodegroup:
#: exactly the taint the nodegroup sets.
WORKLOAD_TOLERATION: Final = {
    "key": NEURON_TAINT_KEY,
    "operator": "Equal",
    "value": "true",
    "effect": NEURON_TAINT["effect"],
}
#: Toleration of the device-plugin daemons (Neuron, EFA): any value of the taint, so a node
#: tainted by hand with another value still gets its devices advertised.
DEVICE_PLUGIN_TOLERATION: Final = {
    "key": NEURON_TAINT_KEY,
    "operator": "Exists",
    "effect": NEURON_TAINT["effect"],
}

#: Extended resources the device plugins advertise.
NEURON_RESOURCE: Final = "aws.amazon.com/neuron"
NEURONCORE_RESOURCE: Final = "aws.amazon.com/neuroncore"
EFA_RESOURCE: Final = "vpc.amazonaws.com/efa"

#: Namespace of the training job, its service account, the FSx claim and TensorBoard.
TRAINING_NAMESPACE: Final = "training"
#: Volcano queue the training job is submitted to.
TRAINING_QUEUE: Final = "training"

#: Karpenter's pod annotation (value "true"): a node that runs such a pod is not disrupted
#: voluntarily (consolidation, drift), and a drain does not evict the pod before the NodePool's
#: ``terminationGracePeriod`` runs out (kubernetes-sigs/karpenter v1.14.1
#: pkg/apis/v1/labels.go ``DoNotDisruptAnnotationKey``; docs concepts/disruption.md). Set on the
#: training pods when Karpenter launches the Trainium nodes.
DO_NOT_DISRUPT_ANNOTATION: Final = "karpenter.sh/do-not-disrupt"
