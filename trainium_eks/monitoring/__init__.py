"""Monitoring of the training platform: what Prometheus scrapes, the alerts, the dashboard, AMP.

One concept per module; the construct that installs them is
:class:`~trainium_eks.addons.monitoring.PlatformMonitoring` (and, for the workload's exporters,
:class:`~trainium_eks.monitoring.exporters.TrainingExporters`).

- :mod:`.names`: the namespace, release and the names the chart derives from it;
- :mod:`.stack_values`: kube-prometheus-stack's values;
- :mod:`.neuron_monitor`, :mod:`.exporters`: the node exporters beyond the chart's;
- :mod:`.scrape`: PodMonitors and the training pods' NetworkPolicy;
- :mod:`.options`: what the monitoring add-on installs (:class:`~.options.MonitoringOptions`);
- :mod:`.karpenter_capacity`: Karpenter's metrics (its chart's ServiceMonitor) with ``trainium_capacity=karpenter``;
- :mod:`.rules`, :mod:`.dashboard`: the alerts and the Grafana dashboard;
- :mod:`.catalog`: every metric they read, with the exporter that emits it;
- :mod:`.amp`, :mod:`.fsx_alarm`: Amazon Managed Service for Prometheus, the CloudWatch alarm on FSx.
"""

from .amp import AmpRemoteWrite
from .exporters import TrainingExporters
from .fsx_alarm import FsxCapacityAlarm
from .karpenter_capacity import KarpenterCapacity, karpenter_chart_monitoring_values

__all__ = [
    "AmpRemoteWrite",
    "FsxCapacityAlarm",
    "KarpenterCapacity",
    "TrainingExporters",
    "karpenter_chart_monitoring_values",
]
