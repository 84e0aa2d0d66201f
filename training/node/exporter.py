"""What the node exporters (:mod:`training.node.efa_exporter`, :mod:`training.node.fsx_exporter`) share:
one collector in a registry of its own, served over HTTP until the pod is stopped."""

from __future__ import annotations

import signal
import threading

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.registry import Collector


def registry_of(collector: Collector) -> CollectorRegistry:
    """A registry holding only ``collector`` (no process or platform metrics of the exporter)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def serve_until_stopped(registry: CollectorRegistry, port: int) -> int:
    """Serve ``registry`` on ``port`` until SIGTERM (the kubelet) or SIGINT; exit status 0."""
    server, _ = start_http_server(port, registry=registry)
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    signal.signal(signal.SIGINT, lambda *_: stopped.set())
    stopped.wait()
    server.shutdown()
    return 0
