"""Names the monitoring pieces share: the namespace, the Helm release and what it names after itself.

kube-prometheus-stack names its objects ``<fullname>-<component>``, and the fullname is the
release name when that contains the chart's name (templates/_helpers.tpl,
``kube-prometheus-stack.fullname``, chart 88.5.3); Grafana's subchart does the same with its own
name (grafana-community/helm-charts grafana-12.11.1, ``grafana.fullname``). With the release
``kube-prometheus-stack`` the names below follow.
"""

from __future__ import annotations

from typing import Any, Final

#: Namespace of the stack, neuron-monitor and the dashboard (Pod Security level ``privileged``:
#: node-exporter uses the host's network, PID namespace and file system, neuron-monitor is
#: privileged).
NAMESPACE: Final = "monitoring"
#: Helm release of kube-prometheus-stack, set explicitly: its Prometheus selects PodMonitors and
#: PrometheusRules labelled ``release: <release>`` in any namespace (``*SelectorNilUsesHelmValues``
#: defaults, templates/prometheus/prometheus.yaml L193-223).
RELEASE: Final = "kube-prometheus-stack"
RELEASE_LABEL: Final = {"release": RELEASE}
PROMETHEUS_SERVICE: Final = f"{RELEASE}-prometheus"
PROMETHEUS_PORT: Final = 9090
#: Service account of the Prometheus pods (named in the values: the AMP Pod Identity association
#: binds to it by name).
PROMETHEUS_SERVICE_ACCOUNT: Final = f"{RELEASE}-prometheus"
GRAFANA_SERVICE: Final = f"{RELEASE}-grafana"
#: The chart's Grafana Service listens on 80 (grafana-12.11.1 values.yaml ``service.port``).
GRAFANA_PORT: Final = 80
#: The Secret the Grafana chart generates the admin password into (same name as the Service).
GRAFANA_ADMIN_SECRET: Final = f"{RELEASE}-grafana"
#: Uid of the Prometheus datasource the chart provisions (kube-prometheus-stack values.yaml
#: ``grafana.sidecar.datasources.uid``).
DATASOURCE_UID: Final = "prometheus"
#: Label every series of our scrapes carries: the Kubernetes node of the target pod.
NODE_LABEL: Final = "node"
#: Label of the training series: the job the pod belongs to (its ``trainium-eks/job`` label).
TRAINING_JOB_LABEL: Final = "training_job"


def node_relabeling() -> dict[str, Any]:
    """A relabel config that puts the target pod's node name into :data:`NODE_LABEL`."""
    return {
        "sourceLabels": ["__meta_kubernetes_pod_node_name"],
        "targetLabel": NODE_LABEL,
        "action": "replace",
    }


#: Local ports of the port-forward commands.
LOCAL_PORTS: Final = {"grafana": 3000, "prometheus": 9090}


def port_forward_commands() -> dict[str, str]:
    """``kubectl port-forward`` of Grafana and Prometheus (no public endpoint), by service."""
    services = {
        "grafana": (GRAFANA_SERVICE, GRAFANA_PORT),
        "prometheus": (PROMETHEUS_SERVICE, PROMETHEUS_PORT),
    }
    return {
        name: f"kubectl port-forward -n {NAMESPACE} svc/{service} {LOCAL_PORTS[name]}:{port}"
        for name, (service, port) in services.items()
    }


def grafana_password_command() -> str:
    """Reads the generated Grafana admin password (user ``admin``) from its Secret."""
    return (
        f"kubectl get secret -n {NAMESPACE} {GRAFANA_ADMIN_SECRET} "
        "-o jsonpath='{.data.admin-password}' | base64 -d"
    )
