"""Cluster add-ons for Trainium training: device plugins, Volcano, etcd, storage, observability and
monitoring.

Each module here installs one add-on; :class:`~trainium_eks.addons.trainium_addons.TrainiumAddons`
composes them on a cluster in the order they need.
"""

from .ebs_csi import EbsCsiDriver
from .efa import EfaDevicePlugin
from .etcd import EtcdServer
from .monitoring import PlatformMonitoring
from .neuron import NeuronDevicePlugin
from .observability import ObservabilityAddons
from .volcano import VolcanoScheduler

__all__ = [
    "EbsCsiDriver",
    "EfaDevicePlugin",
    "EtcdServer",
    "NeuronDevicePlugin",
    "ObservabilityAddons",
    "PlatformMonitoring",
    "VolcanoScheduler",
]
