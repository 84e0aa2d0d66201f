"""neuron-monitor's series as its exporter writes them: the errors alert counts exactly the error
types Neuron documents as failures, and nothing reads the instance labels that stay empty on nodes
whose IMDS hop limit is 1."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from tests.contracts import neuron_monitor
from tests.support import k8s_manifests
from tests.trainium_eks.monitoring.deployed import deployed_dashboard, deployed_rule_groups, panel_exprs

CASES = yaml.safe_load(
    (Path(__file__).parents[1] / "trainium_eks" / "monitoring" / "alert_cases.yaml").read_text()
)


def test_given_each_documented_error_type_then_the_errors_alert_fires_exactly_for_failures():
    # The promtool run of these cases against the deployed rules is tests/trainium_eks/monitoring/test_rules.py.
    outcome: dict[str, bool] = {}
    for case in CASES:
        if case["alert"] != "NeuronExecutionErrors":
            continue
        for series, values in case["series"].items():
            growing = not re.fullmatch(r"\d+x\d+", str(values))  # promtool: 'axn' is a constant
            if growing:
                (error_type,) = re.findall(r'error_type="(\w+)"', series)
                outcome[error_type] = bool(case["fires"])
    documented = {e.name for e in neuron_monitor.ERROR_TYPES.entries}
    assert set(outcome) == documented
    assert outcome == {name: name not in neuron_monitor.RECOVERABLE_ERROR_TYPES for name in documented}


def _rules_and_panels(platform_json) -> list[str]:
    """Every PromQL expression the platform deploys: its alert rules and its dashboard's queries."""
    exprs = [r["expr"] for g in deployed_rule_groups(platform_json) for r in g["rules"]]
    return exprs + list(panel_exprs(deployed_dashboard(platform_json)).values())


def test_given_hop_limit_one_then_nothing_reads_the_instance_labels_imds_would_fill(platform_json):
    exprs = _rules_and_panels(platform_json)
    assert any("execution_errors_total" in e for e in exprs)
    labels = {e.name for e in neuron_monitor.INSTANCE_LABELS.entries}
    readers = {e for e in exprs for label in labels if re.search(rf"\b{label}\b", e)}
    assert readers == set()


def test_given_the_daemonset_then_it_keeps_neurons_network_and_the_nodes_keep_hop_limit_one(platform_json):
    (ds,) = [
        o
        for _, o in k8s_manifests(platform_json)
        if o.get("kind") == "DaemonSet" and o["metadata"]["name"] == "neuron-monitor"
    ]
    assert (
        ds["spec"]["template"]["spec"].get("hostNetwork", False)
        is neuron_monitor.NEURON_DAEMONSET_HOST_NETWORK
    )
    templates = [
        r["Properties"]["LaunchTemplateData"]
        for r in platform_json["Resources"].values()
        if r["Type"] == "AWS::EC2::LaunchTemplate"
    ]
    assert templates and all(t["MetadataOptions"]["HttpPutResponseHopLimit"] == 1 for t in templates)
    assert all(t["MetadataOptions"]["HttpTokens"] == "required" for t in templates)
