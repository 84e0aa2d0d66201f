"""The Grafana dashboard of a training run, written in Python and provisioned as a ConfigMap.

Grafana's dashboard sidecar loads every ConfigMap labelled ``grafana_dashboard: "1"`` in any
namespace (kube-prometheus-stack 88.5.3 values.yaml ``grafana.sidecar.dashboards``: label,
labelValue "1", searchNamespace ALL). The JSON is Grafana's classic dashboard model, as the chart's
own dashboards are (``schemaVersion`` 39, migrated on load by Grafana 13): a ``datasource``
variable of type ``datasource`` and every panel and query referring to it by ``${datasource}``.

Layout: a "Run" row (throughput, MFU, loss, step time, progress, checkpoints, restarts and the
time they cost, held-out masked-LM and next-sentence accuracy, of the selected training job), then
one row per Trainium node (a row repeated by the ``node`` variable):
NeuronCore utilization per core, Neuron device memory, EFA traffic, host memory and CPU.
Every query reads series of :mod:`.catalog`; ``$__rate_interval`` is Grafana's own rate window.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .names import DATASOURCE_UID, NAMESPACE

#: Every panel's and query's datasource: the dashboard's ``datasource`` variable.
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
#: The sidecar's label (kube-prometheus-stack values.yaml ``grafana.sidecar.dashboards.label`` /
#: ``labelValue``).
SIDECAR_LABEL = {"grafana_dashboard": "1"}
UID = "trainium-bert-training"
_JOB = '{training_job=~"$training_job"}'
_NODE = 'node="$node"'


@dataclass(frozen=True)
class Panel:
    """A time series panel: its queries are (PromQL, legend)."""

    title: str
    unit: str
    queries: tuple[tuple[str, str], ...]
    description: str = ""


#: The run's panels: the training script's own metrics (:mod:`training.trainer.prom_metrics`).
RUN_PANELS = (
    Panel(
        "Throughput",
        "short",
        ((f"max by (training_job) (bert_train_sequences_per_second{_JOB})", "{{training_job}} sequences/s"),),
        "Sequences per second of the global batch, from rank 0.",
    ),
    Panel(
        "Model FLOPs utilization",
        "percentunit",
        ((f"max by (training_job) (bert_train_mfu_ratio{_JOB})", "{{training_job}} MFU"),),
        "Model FLOPs per second over the devices' BF16 peak.",
    ),
    Panel(
        "Loss",
        "short",
        ((f"max by (training_job) (bert_train_loss{_JOB})", "{{training_job}} loss"),),
        "MLM + NSP loss of the last logged step.",
    ),
    Panel(
        "Step time",
        "s",
        ((f"max by (training_job) (bert_train_step_duration_seconds{_JOB})", "{{training_job}} s/step"),),
        "Wall time of one optimizer step.",
    ),
    Panel(
        "Progress",
        "percentunit",
        (
            (
                f"max by (training_job) (bert_train_step{_JOB}) / max by (training_job) (bert_train_max_steps{_JOB})",
                "{{training_job}} of the schedule",
            ),
        ),
        "Optimizer steps done over --max_steps.",
    ),
    Panel(
        "Checkpoints",
        "short",
        (
            (
                f"max by (training_job) (bert_train_step{_JOB} - bert_train_last_checkpoint_step{_JOB})",
                "{{training_job}} steps since the last checkpoint",
            ),
            (
                f"max by (training_job) (bert_train_checkpoint_duration_seconds{_JOB})",
                "{{training_job}} last write (s)",
            ),
        ),
        "Steps a restart would repeat, and the last checkpoint's write time.",
    ),
    Panel(
        "Restarts",
        "short",
        (
            (
                f"max by (training_job, cause) (bert_train_restarts_total{_JOB})",
                "{{training_job}} {{cause}}",
            ),
            (f"max by (training_job) (bert_train_suspect_nodes{_JOB})", "{{training_job}} nodes named"),
        ),
        "Restarts of the run by cause (every cause, 0 until one happens), from its restart ledger "
        "(rank 0 reads it at each start), and the nodes its hang, fabric, device or driver lines "
        "name (docs/monitoring.md, Restarts).",
    ),
    Panel(
        "Time lost to restarts",
        "s",
        (
            (
                f"max by (training_job, cause) (bert_train_lost_seconds_total{_JOB})",
                "{{training_job}} {{cause}}",
            ),
        ),
        "Wall time each cause cost: from the point a restart went back to (its checkpoint) to the "
        "next start of training.",
    ),
    Panel(
        "Held-out masked-LM accuracy",
        "percentunit",
        (
            (
                f"max by (training_job) (bert_train_eval_mlm_accuracy_ratio{_JOB})",
                "{{training_job}} masked-LM accuracy",
            ),
        ),
        "Share of the held-out set's masked positions predicted right at the last evaluation "
        "(--eval_dir, every --eval_every steps and after the last; NaN until the first). MLPerf's "
        "BERT target, 0.720 after phase 2, is measured on its own set.",
    ),
    Panel(
        "Held-out next-sentence accuracy",
        "percentunit",
        (
            (
                f"max by (training_job) (bert_train_eval_nsp_accuracy_ratio{_JOB})",
                "{{training_job}} next-sentence accuracy",
            ),
        ),
        "Share of the held-out set's sentence pairs classified right at the last evaluation "
        "(NaN until the first).",
    ),
)
#: One row of these per Trainium node.
NODE_PANELS = (
    Panel(
        "NeuronCore utilization",
        "percentunit",
        ((f"max by (neuroncore) (neuroncore_utilization_ratio{{{_NODE}}})", "core {{neuroncore}}"),),
        "neuron-monitor: busy share of each NeuronCore.",
    ),
    Panel(
        "Neuron device memory",
        "bytes",
        ((f'sum(neuron_runtime_memory_used_bytes{{{_NODE}, memory_location="neuron_device"}})', "used"),),
        "neuron-monitor: device memory the Neuron runtimes hold.",
    ),
    Panel(
        "EFA traffic",
        "Bps",
        tuple(
            (f"sum(rate(efa_{counter}_total{{{_NODE}}}[$__rate_interval]))", legend)
            for counter, legend in (
                ("tx_bytes", "tx"),
                ("rx_bytes", "rx"),
                ("rdma_write_bytes", "RDMA write"),
                ("rdma_read_bytes", "RDMA read"),
            )
        ),
        "EFA exporter: bytes per second over all of the node's EFA interfaces.",
    ),
    Panel(
        "Host memory",
        "bytes",
        (
            (
                f"max(node_memory_MemTotal_bytes{{{_NODE}}} - node_memory_MemAvailable_bytes{{{_NODE}}})",
                "used",
            ),
            (f"max(node_memory_MemTotal_bytes{{{_NODE}}})", "total"),
        ),
        "node-exporter: memory in use (total minus available).",
    ),
    Panel(
        "Host CPU",
        "percentunit",
        ((f'1 - avg(rate(node_cpu_seconds_total{{{_NODE}, mode="idle"}}[$__rate_interval]))', "busy"),),
        "node-exporter: share of the node's vCPUs not idle.",
    ),
)


def _timeseries(panel: Panel, panel_id: int, x: int, y: int, width: int) -> dict[str, Any]:
    return {
        "id": panel_id,
        "type": "timeseries",
        "title": panel.title,
        "description": panel.description,
        "datasource": dict(DATASOURCE),
        "gridPos": {"h": 8, "w": width, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}},
        "targets": [
            {"refId": chr(ord("A") + i), "datasource": dict(DATASOURCE), "expr": expr, "legendFormat": legend}
            for i, (expr, legend) in enumerate(panel.queries)
        ],
    }


def _row(title: str, panel_id: int, y: int, repeat: str | None = None) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": panel_id,
        "type": "row",
        "title": title,
        "collapsed": False,
        "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
        "panels": [],
    }
    if repeat:
        row["repeat"] = repeat
    return row


def _query_variable(name: str, label: str, query: str) -> dict[str, Any]:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": dict(DATASOURCE),
        "definition": query,
        "query": {"query": query, "refId": f"{name}-variable"},
        "refresh": 2,  # on time range change: new jobs and nodes appear
        "includeAll": True,
        "allValue": ".*",
        "multi": True,
        "sort": 1,
    }


def dashboard() -> dict[str, Any]:
    """The dashboard's JSON model."""
    panels: list[dict[str, Any]] = []
    next_id = 1

    def add_rows(title: str, group: tuple[Panel, ...], y: int, repeat: str | None = None) -> int:
        nonlocal next_id
        panels.append(_row(title, next_id, y, repeat))
        next_id += 1
        y += 1
        width = 8
        for i, panel in enumerate(group):
            x = (i % 3) * width
            if i and i % 3 == 0:
                y += 8
            panels.append(_timeseries(panel, next_id, x, y, width))
            next_id += 1
        return y + 8

    y = add_rows("Run", RUN_PANELS, 0)
    add_rows("Node $node", NODE_PANELS, y, repeat="node")
    return {
        "uid": UID,
        "title": "BERT pretraining on Trainium",
        "description": "The training run, and per Trainium node its NeuronCores, device memory, EFA and host.",
        "tags": ["trainium", "bert", "neuron", "efa"],
        "schemaVersion": 39,
        "editable": False,
        "graphTooltip": 1,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "1m",
        "timezone": "utc",
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Data source",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {"text": "Prometheus", "value": DATASOURCE_UID},
                },
                _query_variable(
                    "training_job", "Training job", "label_values(bert_train_step, training_job)"
                ),
                _query_variable(
                    "node",
                    "Trainium node",
                    'label_values(kube_node_labels{label_trainium_eks_pool="trainium"}, node)',
                ),
            ]
        },
        "panels": panels,
    }


def dashboard_config_map() -> dict[str, Any]:
    """The ConfigMap the Grafana sidecar provisions the dashboard from."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "trainium-bert-dashboard",
            "namespace": NAMESPACE,
            "labels": dict(SIDECAR_LABEL),
        },
        "data": {f"{UID}.json": json.dumps(dashboard(), sort_keys=True)},
    }


def queries(panels: tuple[Panel, ...]) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every query of ``panels``."""
    return [(p.title, expr) for p in panels for expr, _ in p.queries]
