"""Readers of what the platform deploys for monitoring: its PrometheusRule and its Grafana dashboard,
as the synthesized template applies them (shared by the monitoring tests and the contract tests)."""

from __future__ import annotations

import json
from typing import Any

from tests.trainium_eks.addons import objects


def deployed_rule_groups(template: dict[str, Any]) -> list[dict[str, Any]]:
    """The rule groups of the one PrometheusRule, as kube-prometheus-stack selects it."""
    ((_, rule),) = objects(template, "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    return rule["spec"]["groups"]


def deployed_dashboard(template: dict[str, Any]) -> dict[str, Any]:
    """The dashboard model of the one ConfigMap Grafana's sidecar provisions."""
    ((_, config_map),) = objects(template, "ConfigMap")
    # kube-prometheus-stack's sidecar: label grafana_dashboard "1", any namespace.
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    (document,) = config_map["data"].values()
    return json.loads(document)


def panels(model: dict[str, Any]) -> list[dict[str, Any]]:
    """The dashboard's panels, rows left out."""
    return [p for p in model["panels"] if p["type"] != "row"]


def panel_exprs(model: dict[str, Any]) -> dict[str, str]:
    """``<panel title>/<refId>`` -> the query."""
    return {f"{p['title']}/{t['refId']}": t["expr"] for p in panels(model) for t in p["targets"]}
