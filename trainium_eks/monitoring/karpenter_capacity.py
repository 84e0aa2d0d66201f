"""Karpenter's controller metrics in the platform's Prometheus (``trainium_capacity=karpenter``).

The Karpenter chart renders its own ServiceMonitor when asked (``serviceMonitor.enabled``); the
label below makes kube-prometheus-stack's Prometheus select it, as it selects the platform's
PodMonitors (:data:`~trainium_eks.monitoring.names.RELEASE_LABEL`, any namespace). The chart
renders it only if the cluster already serves ``monitoring.coreos.com/v1``
(``.Capabilities.APIVersions.Has`` in its template), so the Karpenter chart must be installed
after kube-prometheus-stack's CRDs.

No ``node`` relabeling here, unlike the PodMonitors: Karpenter's own pod series carry a ``node``
label, which a target label of that name would rename to ``exported_node``.

The alert that reads these series is ``TrainiumCapacityMissing`` (:mod:`.rules`). Names and
citations: tests/contracts/karpenter_metrics.py (Karpenter 1.14.1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from .names import RELEASE_LABEL

#: Counter of NodeClaims Karpenter removed, by ``reason`` and ``nodepool``; a launch that EC2
#: refused for capacity or quota counts with :data:`INSUFFICIENT_CAPACITY_REASON`.
NODECLAIMS_DISRUPTED: Final = "karpenter_nodeclaims_disrupted_total"
INSUFFICIENT_CAPACITY_REASON: Final = "insufficient_capacity"
#: Constant 1 in every controller replica from its start: Karpenter is being scraped.
BUILD_INFO: Final = "karpenter_build_info"
#: Series the scrape drops: gauges with one series per instance type of the region (and per
#: capacity type and zone), over every type EC2 offers there, not only the NodePool's. Nothing here
#: reads them, and they would outnumber the rest of the platform's series.
DROPPED_SERIES_REGEX: Final = "karpenter_cloudprovider_instance_type_.+"


@dataclass(frozen=True)
class KarpenterCapacity:
    """What the NodePool launches: its name, its one instance type and its one AZ ID."""

    node_pool: str
    instance_type: str
    az_id: str


def karpenter_chart_monitoring_values() -> dict[str, Any]:
    """The Karpenter chart's values that turn its ServiceMonitor on, labelled for the platform's
    Prometheus; merge them into the chart's values (keys of charts/karpenter/values.yaml)."""
    return {
        "serviceMonitor": {
            "enabled": True,
            "additionalLabels": dict(RELEASE_LABEL),
            "metricRelabelings": [
                {"sourceLabels": ["__name__"], "regex": DROPPED_SERIES_REGEX, "action": "drop"}
            ],
        }
    }
