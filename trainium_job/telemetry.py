"""Where a training pod serves its Prometheus metrics: one named port, the same on every pod.

``training.pretrain --metrics_port`` starts the server in the process with ``LOCAL_RANK`` 0 of
each node (:mod:`training.prom_metrics`), so every pod of a job answers on the port once its
training process runs; the pod declares the port by name for the PodMonitor that scrapes it.
"""

from __future__ import annotations

from typing import Any, Final

#: Port of the training metrics (the c10d store is on 29400, Prometheus's own default is 9090).
METRICS_PORT: Final = 9400
#: Name of the port in the pod spec: the PodMonitor selects it by this name.
METRICS_PORT_NAME: Final = "metrics"
#: Label of the training pods that names their job; the PodMonitor copies it onto every series.
JOB_LABEL: Final = "trainium-eks/job"


def metrics_container_port() -> dict[str, Any]:
    """The training container's port entry for the metrics endpoint."""
    return {"name": METRICS_PORT_NAME, "containerPort": METRICS_PORT, "protocol": "TCP"}
