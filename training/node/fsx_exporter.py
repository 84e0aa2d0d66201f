"""FSx for Lustre capacity for Prometheus: ``python -m training.node.fsx_exporter --path /data``.

The FSx CSI driver reports no volume statistics to the kubelet (its ``NodeGetVolumeStats`` is
``Unimplemented`` and it advertises no node capabilities: kubernetes-sigs/aws-fsx-csi-driver
v1.8.0 pkg/driver/node.go L41, L224-226), so no ``kubelet_volume_stats_*`` series exist for the
claim. A small Deployment that mounts the claim read-only (``trainium_eks.monitoring``) answers
each scrape with ``statvfs(2)`` of the mount, which a Lustre client reports for the whole file
system:

* ``fsx_filesystem_size_bytes``, ``fsx_filesystem_avail_bytes`` (what an unprivileged writer can
  still use), ``fsx_filesystem_files``, ``fsx_filesystem_files_free``, each ``{mountpoint}``.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from trainium_job.telemetry import FSX_EXPORTER_PORT

from .exporter import registry_of, serve_until_stopped


class StatvfsCollector(Collector):
    """Size, available bytes and inodes of the file system mounted at ``path``."""

    def __init__(self, path: str) -> None:
        self.path = path

    def collect(self) -> Iterator[Metric]:
        st = os.statvfs(self.path)
        values = {
            "fsx_filesystem_size_bytes": ("Size of the file system", st.f_blocks * st.f_frsize),
            "fsx_filesystem_avail_bytes": (
                "Bytes a non-root writer can still use",
                st.f_bavail * st.f_frsize,
            ),
            "fsx_filesystem_files": ("Inodes of the file system", st.f_files),
            "fsx_filesystem_files_free": ("Free inodes", st.f_ffree),
        }
        for name, (doc, value) in values.items():
            family = GaugeMetricFamily(name, doc, labels=["mountpoint"])
            family.add_metric([self.path], value)
            yield family


def registry(path: str) -> CollectorRegistry:
    return registry_of(StatvfsCollector(path))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m training.node.fsx_exporter", description=__doc__.splitlines()[0]
    )
    p.add_argument("--port", type=int, default=FSX_EXPORTER_PORT, help="HTTP port of the metrics")
    p.add_argument("--path", default="/data", help="mount point of the file system")
    args = p.parse_args(argv)
    return serve_until_stopped(registry(args.path), args.port)


if __name__ == "__main__":
    raise SystemExit(main())
