"""The job contract: what the CDK job (``trainium_eks``) and the TorchX job share.

Standard library only: importing it loads neither aws-cdk, jsii nor torch, so ``torchx run``
and the training image read the same facts as ``cdk synth``. ``trainium_eks`` and ``training``
import it; it imports neither. The TorchX component (``trainium_job.torchx_component``, which
needs ``torchx``) is not imported here.
"""

from .allocatable import DEFAULT_NODE_DAEMONS, NODE_MARGIN, Resources, node_allocatable, training_resources
from .checks import dns_label, flag, one_of, whole_number
from .errors import ConfigError
from .instances import INSTANCE_FACTS, InstanceFacts, instance_facts
from .job import RenderedJob, render_job
from .plan import TrainingPlan, plan_training
from .scheduling import (
    DEVICE_PLUGIN_TOLERATION,
    EFA_RESOURCE,
    INSTANCE_TYPE_LABEL,
    NEURON_RESOURCE,
    NEURON_TAINT,
    NEURONCORE_RESOURCE,
    SYSTEM_NODE_LABEL,
    TRAINING_NAMESPACE,
    TRAINING_QUEUE,
    TRAINIUM_NODE_LABEL,
    WORKLOAD_TOLERATION,
)
from .spec import BertJobSpec

__all__ = [
    "DEFAULT_NODE_DAEMONS",
    "DEVICE_PLUGIN_TOLERATION",
    "EFA_RESOURCE",
    "INSTANCE_FACTS",
    "INSTANCE_TYPE_LABEL",
    "NEURONCORE_RESOURCE",
    "NEURON_RESOURCE",
    "NEURON_TAINT",
    "NODE_MARGIN",
    "SYSTEM_NODE_LABEL",
    "TRAINIUM_NODE_LABEL",
    "TRAINING_NAMESPACE",
    "TRAINING_QUEUE",
    "WORKLOAD_TOLERATION",
    "BertJobSpec",
    "ConfigError",
    "InstanceFacts",
    "RenderedJob",
    "Resources",
    "TrainingPlan",
    "dns_label",
    "flag",
    "instance_facts",
    "node_allocatable",
    "one_of",
    "plan_training",
    "render_job",
    "training_resources",
    "whole_number",
]
