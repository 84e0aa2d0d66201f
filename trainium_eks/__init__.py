"""Constructs for distributed training on AWS Trainium with Amazon EKS.

The public API is what this module re-exports; submodules are implementation detail.
"""

from .cluster import SYSTEM_NODE_LABEL, TrainiumCluster
from .config import ConfigError, PlatformConfig, config_from_context
from .instance_types import INSTANCE_FACTS, InstanceFacts, instance_facts
from .launch_template import TrainiumLaunchTemplate, efa_network_interfaces
from .nag import acknowledge_findings, suppress_platform_findings
from .network import TrainiumNetwork
from .nodegroup import NEURON_TAINT, TRAINIUM_NODE_LABEL, NeuronNodegroup
from .review import platform_review
from .versions import DEFAULT_KUBERNETES_VERSION, KUBERNETES_RELEASES, KubernetesRelease

__all__ = [
    "ConfigError",
    "DEFAULT_KUBERNETES_VERSION",
    "INSTANCE_FACTS",
    "InstanceFacts",
    "KUBERNETES_RELEASES",
    "KubernetesRelease",
    "NEURON_TAINT",
    "NeuronNodegroup",
    "PlatformConfig",
    "SYSTEM_NODE_LABEL",
    "TRAINIUM_NODE_LABEL",
    "TrainiumCluster",
    "TrainiumLaunchTemplate",
    "TrainiumNetwork",
    "acknowledge_findings",
    "config_from_context",
    "efa_network_interfaces",
    "instance_facts",
    "platform_review",
    "suppress_platform_findings",
]
