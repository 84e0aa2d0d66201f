"""What the monitoring add-on installs (:class:`MonitoringOptions`), and the options' checks.

Beside the monitoring's parts rather than in the add-on's module: the add-ons' shared context
(:class:`~trainium_eks.addons.addon.AddonContext`) and the configuration both carry the options.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainium_job import checks

#: gp3 volumes from 1 GiB to 16 TiB (EBS user guide, "Amazon EBS volume types").
MAX_VOLUME_GIB = 16384


@dataclass(frozen=True)
class MonitoringOptions:
    """What the monitoring add-on installs. Each default is the platform's."""

    #: Prometheus volume (GiB, gp3). Retention by size is 80% of it (see ``stack_values``).
    volume_gib: int = 50
    #: Days of metrics Prometheus keeps (whichever of time and size comes first).
    retention_days: int = 30
    #: Grafana with the training dashboard.
    grafana: bool = True
    #: Alertmanager (off: no receiver is configured; the alerts show in Prometheus and Grafana).
    alertmanager: bool = False
    #: neuron-monitor on the Trainium nodes.
    neuron_monitor: bool = True
    #: Remote write to an Amazon Managed Service for Prometheus workspace.
    amp_remote_write: bool = False
    #: FsxFreeCapacityLow fires below this share of FSx free (percent).
    fsx_free_percent: int = 10
    #: Minutes without an optimizer step before TrainingStalled fires.
    stall_minutes: int = 15


def check_monitoring_options(options: MonitoringOptions, *, keys: dict[str, str] | None = None) -> None:
    """ConfigError for an option out of range; ``keys`` maps a field to the name the user typed."""
    key = (keys or {}).get
    checks.whole_number(
        key("volume_gib", "volume_gib"), options.volume_gib, minimum=10, maximum=MAX_VOLUME_GIB
    )
    checks.whole_number(
        key("retention_days", "retention_days"), options.retention_days, minimum=1, maximum=3650
    )
    checks.whole_number(
        key("fsx_free_percent", "fsx_free_percent"), options.fsx_free_percent, minimum=1, maximum=99
    )
    checks.whole_number(key("stall_minutes", "stall_minutes"), options.stall_minutes, minimum=1)
    for name in ("grafana", "alertmanager", "neuron_monitor", "amp_remote_write"):
        checks.flag(key(name, name), getattr(options, name))
