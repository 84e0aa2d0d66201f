"""neuron-monitor on every Trainium node, as Neuron publishes it, and the PodMonitor that scrapes it.

The DaemonSet follows Neuron's own (aws-neuron/aws-neuron-sdk src/k8/k8s-neuron-monitor-daemonset.yml
at 81ce03ae, 2026-08-21: image ``public.ecr.aws/neuron/neuron-monitor:1.3.0``, ``/opt/bin/entrypoint.sh
--port 8000 --neuron-monitor-config /opt/aws/neuron/bin/neuron-monitor.conf``, an unnamed container
port 8000, privileged, requests 256m/128Mi, limits 500m/256Mi, ``GOMEMLIMIT=160MiB``), with what
that file leaves to the cluster: it runs only on the Trainium nodegroup and tolerates its taint.
Privileged is how Neuron's file reaches the devices (it mounts none), hence the monitoring
namespace's ``privileged`` Pod Security level.

The entrypoint pipes ``neuron-monitor``'s JSON reports into ``neuron-monitor-prometheus.py``
(Neuron Monitor User Guide, "neuron-monitor-prometheus.py": default port 8000), which exports
``neuroncore_utilization_ratio``, ``neuron_runtime_memory_used_bytes``, ``execution_errors_total``,
``hardware_ecc_events_total``, ``neuron_hardware_info`` and more (names: :mod:`.catalog`). The
port has no name, so the PodMonitor selects it by number; the endpoint answers on any path.
"""

from __future__ import annotations

from typing import Any

from trainium_job.scheduling import DEVICE_PLUGIN_TOLERATION, TRAINIUM_NODE_LABEL

from ..versions import AddonPin
from .names import NAMESPACE
from .scrape import pod_monitor

NAME = "neuron-monitor"
PORT = 8000
_LABELS = {"app.kubernetes.io/name": NAME}
#: Neuron's requests and limits (the Trainium node budget counts the requests).
RESOURCES = {"requests": {"cpu": "256m", "memory": "128Mi"}, "limits": {"cpu": "500m", "memory": "256Mi"}}


# Neuron's own DaemonSet pins this tag (aws-neuron/aws-neuron-sdk
# src/k8/k8s-neuron-monitor-daemonset.yml L43 at 81ce03ae, 2026-08-21; unchanged since SDK
# 2.22.0). Tag-pinned (no digest could be verified offline).
#: The neuron-monitor image.
IMAGE = AddonPin("public.ecr.aws/neuron/neuron-monitor", "1.3.0")


def neuron_monitor_daemonset(pin: AddonPin = IMAGE) -> dict[str, Any]:
    """The DaemonSet on the Trainium nodes."""
    container = {
        "name": NAME,
        "image": pin.image,
        "command": ["/opt/bin/entrypoint.sh"],
        "args": ["--port", str(PORT), "--neuron-monitor-config", "/opt/aws/neuron/bin/neuron-monitor.conf"],
        "ports": [{"containerPort": PORT, "protocol": "TCP"}],
        "resources": {kind: dict(values) for kind, values in RESOURCES.items()},
        "env": [{"name": "GOMEMLIMIT", "value": "160MiB"}],
        "securityContext": {"privileged": True},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": dict(_LABELS)},
        "spec": {
            "selector": {"matchLabels": dict(_LABELS)},
            "template": {
                "metadata": {"labels": dict(_LABELS)},
                "spec": {
                    "automountServiceAccountToken": False,
                    "nodeSelector": dict(TRAINIUM_NODE_LABEL),
                    "tolerations": [dict(DEVICE_PLUGIN_TOLERATION)],
                    "containers": [container],
                },
            },
        },
    }


def neuron_monitor_pod_monitor() -> dict[str, Any]:
    return pod_monitor(
        NAME, namespace=NAMESPACE, selector=_LABELS, endpoint={"portNumber": PORT, "path": "/metrics"}
    )
