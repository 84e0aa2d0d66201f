"""The provisioned Grafana dashboard: found by the sidecar, datasource references that resolve,
a row per node, and panel queries that parse in PromQL and read only emitted series."""

from __future__ import annotations

import json

import pytest

from tests.trainium_eks.addons import objects
from tests.trainium_eks.monitoring.deployed import deployed_dashboard, panel_exprs, panels
from tests.trainium_eks.monitoring.promtool import GRAFANA_VARIABLES, check_expressions, metric_names
from trainium_eks.monitoring.catalog import CATALOG
from trainium_eks.monitoring.dashboard import NODE_PANELS, RUN_PANELS, dashboard


def _substituted(expr: str) -> str:
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    assert "$" not in expr, expr
    return expr


def test_given_default_config_then_the_dashboard_is_provisioned_as_built(platform_json):
    assert deployed_dashboard(platform_json) == json.loads(json.dumps(dashboard()))


def test_given_grafana_off_then_no_dashboard_is_applied():
    from tests.support import synth_platform

    assert not objects(synth_platform(monitoring_grafana="false"), "ConfigMap")


def test_given_the_dashboard_then_every_datasource_reference_is_its_datasource_variable(platform_json):
    model = deployed_dashboard(platform_json)
    variables = {v["name"]: v for v in model["templating"]["list"]}
    assert (
        variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    )
    # The chart provisions the Prometheus datasource as uid "prometheus" (grafana.sidecar.datasources.uid).
    assert variables["datasource"]["current"]["value"] == "prometheus"
    references = [p["datasource"] for p in panels(model)]
    references += [t["datasource"] for p in panels(model) for t in p["targets"]]
    references += [v["datasource"] for v in variables.values() if "datasource" in v]
    assert references and all(r == {"type": "prometheus", "uid": "${datasource}"} for r in references)
    assert 'Prometheus"' not in json.dumps(model).replace('"text": "Prometheus"', "")  # no by-name references


def test_given_the_dashboard_then_node_panels_repeat_in_one_row_per_trainium_node(platform_json):
    model = deployed_dashboard(platform_json)
    rows = [p for p in model["panels"] if p["type"] == "row"]
    assert [r.get("repeat") for r in rows] == [None, "node"]
    node = next(v for v in model["templating"]["list"] if v["name"] == "node")
    assert (
        node["query"]["query"] == 'label_values(kube_node_labels{label_trainium_eks_pool="trainium"}, node)'
    )
    assert node["multi"] and node["includeAll"]
    titles = [p["title"] for p in panels(model)]
    for title in (
        "Throughput", "Model FLOPs utilization", "Loss", "Step time",
        "Held-out masked-LM accuracy", "Held-out next-sentence accuracy",
        "NeuronCore utilization", "Neuron device memory", "EFA traffic", "Host memory",
    ):  # fmt: skip
        assert title in titles
    ids = [p["id"] for p in model["panels"]]
    assert len(ids) == len(set(ids))


def test_given_every_panel_query_then_promtool_parses_it(platform_json, tmp_path):
    exprs = {name: _substituted(e) for name, e in panel_exprs(deployed_dashboard(platform_json)).items()}
    assert len(exprs) >= len(RUN_PANELS) + len(NODE_PANELS)
    proc = check_expressions(tmp_path, exprs)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_given_a_broken_query_then_the_parse_check_fails(tmp_path):
    assert check_expressions(tmp_path, {"bad": "sum(rate(efa_tx_bytes_total[5m])"}).returncode != 0


@pytest.mark.parametrize("panel", [*RUN_PANELS, *NODE_PANELS], ids=lambda p: p.title)
def test_given_a_panel_then_it_reads_only_series_an_exporter_emits(panel):
    for expr, _ in panel.queries:
        names = metric_names(expr)
        assert names and names <= set(CATALOG), names - set(CATALOG)
