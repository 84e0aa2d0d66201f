"""EFA counters for Prometheus: ``python -m training.node.efa_exporter --port 9402``.

A DaemonSet on the Trainium nodes runs it (``trainium_eks.monitoring.efa_exporter``). Each scrape
reads the counters of :mod:`training.node.efa_counters` afresh, so the values are the kernel's:

* ``efa_<counter>_total{device, port}``: each port counter (``efa_tx_bytes_total``,
  ``efa_rx_bytes_total``, ``efa_rdma_read_bytes_total``, ``efa_rdma_write_bytes_total``, ...);
* ``efa_device_<counter>_total{device}``: the device-level command and error counters;
* ``efa_devices``: EFA devices found (8 on a trn1.32xlarge; 0 means none is visible).

Names follow the Prometheus conventions (``_total`` on counters, base unit ``bytes`` in the
name as the kernel's counter names have it). The counters only grow while the driver holds the
device, so ``rate()`` over them is the traffic.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from trainium_job.telemetry import EFA_EXPORTER_PORT

from .efa_counters import SYSFS_ROOT, device_counters, devices, port_counters
from .exporter import registry_of, serve_until_stopped


class EfaCollector(Collector):
    """The counters under ``root`` (``/sys/class/infiniband``, or a host mount of it)."""

    def __init__(self, root: Path = SYSFS_ROOT) -> None:
        self.root = root

    def collect(self) -> Iterator[Metric]:
        found = devices(self.root)
        count = GaugeMetricFamily("efa_devices", "EFA devices with port counters on this node")
        count.add_metric([], len(found))
        yield count
        ports: dict[str, CounterMetricFamily] = {}
        for (device, port, name), value in sorted(port_counters(self.root).items()):
            family = ports.setdefault(
                name,
                CounterMetricFamily(
                    f"efa_{name}", f"EFA port counter {name} (kernel efa driver)", labels=["device", "port"]
                ),
            )
            family.add_metric([device, port], value)
        yield from ports.values()
        per_device: dict[str, CounterMetricFamily] = {}
        for (device, name), value in sorted(device_counters(self.root).items()):
            family = per_device.setdefault(
                name,
                CounterMetricFamily(
                    f"efa_device_{name}", f"EFA device counter {name} (kernel efa driver)", labels=["device"]
                ),
            )
            family.add_metric([device], value)
        yield from per_device.values()


def registry(root: Path = SYSFS_ROOT) -> CollectorRegistry:
    return registry_of(EfaCollector(root))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m training.node.efa_exporter", description=__doc__.splitlines()[0]
    )
    p.add_argument("--port", type=int, default=EFA_EXPORTER_PORT, help="HTTP port of the metrics")
    p.add_argument("--sysfs", type=Path, default=SYSFS_ROOT, help="the infiniband class directory to read")
    args = p.parse_args(argv)
    return serve_until_stopped(registry(args.sysfs), args.port)


if __name__ == "__main__":
    raise SystemExit(main())
