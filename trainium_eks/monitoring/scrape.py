"""What the platform's Prometheus scrapes beyond the chart's own targets, and the policy that lets it.

PodMonitors (``monitoring.coreos.com/v1``, prometheus-operator 0.93.1, the CRD of
kube-prometheus-stack 88.5.3): each carries the release label the chart's Prometheus selects
(:data:`~trainium_eks.monitoring.names.RELEASE_LABEL`) and relabels the target pod's node into
``node``, the label the dashboard repeats its rows by and the alerts group by.

The training pods: Volcano's ``svc`` plugin gives each job a NetworkPolicy that admits only the
job's own pods (volcano-sh/volcano v1.15.1 pkg/controllers/job/plugins/svc/svc.go,
``createNetworkPolicyIfNotExist``, unless ``--disable-network-policy``), and the platform turns
the VPC CNI's network policy agent on: Prometheus could not reach the metrics port. Policies are
additive ("the connections allowed ... is the union of what the applicable policies allow",
Kubernetes docs, "Network Policies"), so the platform keeps Volcano's policy and adds
:func:`training_ingress_policy` for every training pod: the job's pods from each other (the c10d
rendezvous, the collectives' bootstrap), whether or not a launcher's plugin made a policy, and
the monitoring namespace on the metrics port only.
"""

from __future__ import annotations

from typing import Any

from trainium_job.pod_program.metrics import PROGRAM_METRICS_PORT, PROGRAM_METRICS_PORT_NAME
from trainium_job.telemetry import JOB_LABEL, METRICS_PORT, METRICS_PORT_NAME

from .names import NAMESPACE, RELEASE_LABEL, TRAINING_JOB_LABEL, node_relabeling

API = "monitoring.coreos.com/v1"
#: Every training gang's pods: they carry their job's name (``trainium_job.gang``), whatever their
#: ``app.kubernetes.io/name``.
TRAINING_PODS: dict[str, Any] = {"matchExpressions": [{"key": JOB_LABEL, "operator": "Exists"}]}


def _meta_label(label: str) -> str:
    """Prometheus's discovery label of a pod label: unsupported characters become ``_``
    (Prometheus docs, ``kubernetes_sd_config``, role pod: ``__meta_kubernetes_pod_label_<labelname>``)."""
    return "__meta_kubernetes_pod_label_" + "".join(c if c.isalnum() else "_" for c in label)


def pod_monitor(
    name: str,
    *,
    namespace: str,
    selector: dict[str, Any],
    endpoint: dict[str, Any] | list[dict[str, Any]],
    target_namespaces: list[str] | None = None,
    relabelings: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A PodMonitor of the pods matching ``selector`` (in ``namespace`` unless ``target_namespaces``),
    scraping ``endpoint`` (one, or several ports of the same pods)."""
    endpoints = endpoint if isinstance(endpoint, list) else [endpoint]
    spec: dict[str, Any] = {
        "selector": dict(selector) if "matchExpressions" in selector else {"matchLabels": dict(selector)},
        "podMetricsEndpoints": [
            {**e, "relabelings": [node_relabeling(), *(relabelings or [])]} for e in endpoints
        ],
    }
    if target_namespaces is not None:
        spec["namespaceSelector"] = {"matchNames": list(target_namespaces)}
    return {
        "apiVersion": API,
        "kind": "PodMonitor",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(RELEASE_LABEL)},
        "spec": spec,
    }


def training_pod_monitor(training_namespace: str) -> dict[str, Any]:
    """The training pods' metrics ports (the trainer's, the pod program's), with the pod's job name
    as ``training_job``: every training gang's pods, the BERT job's and a job of the user's own
    program (:data:`TRAINING_PODS`)."""
    return pod_monitor(
        "bert-training",
        namespace=NAMESPACE,
        selector=TRAINING_PODS,
        target_namespaces=[training_namespace],
        endpoint=[
            {"port": METRICS_PORT_NAME, "path": "/metrics"},
            {"port": PROGRAM_METRICS_PORT_NAME, "path": "/metrics"},
        ],
        relabelings=[
            {"sourceLabels": [_meta_label(JOB_LABEL)], "targetLabel": TRAINING_JOB_LABEL, "action": "replace"}
        ],
    )


def training_ingress_policy(training_namespace: str) -> dict[str, Any]:
    """Ingress of the training pods: from each other on any port, from monitoring on the metrics ports."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "bert-training-ingress", "namespace": training_namespace},
        "spec": {
            "podSelector": dict(TRAINING_PODS),
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [{"podSelector": dict(TRAINING_PODS)}]},
                {
                    "from": [
                        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}}}
                    ],
                    "ports": [
                        {"protocol": "TCP", "port": METRICS_PORT},
                        {"protocol": "TCP", "port": PROGRAM_METRICS_PORT},
                    ],
                },
            ],
        },
    }
