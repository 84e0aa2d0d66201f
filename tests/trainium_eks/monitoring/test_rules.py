"""The alert rules as deployed: valid for promtool 2.42, each firing when it should and silent on a
healthy run (promtool test rules on synthetic series), each with a summary and a runbook line."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.contracts import karpenter_metrics
from tests.trainium_eks.monitoring.deployed import deployed_rule_groups
from tests.trainium_eks.monitoring.promtool import metric_names, promtool, write_rules
from trainium_eks.monitoring.catalog import CATALOG
from trainium_eks.monitoring.karpenter_capacity import KarpenterCapacity
from trainium_eks.monitoring.rules import alerts, rule_groups
from trainium_eks.nodes.node_pool import NODE_POOL_NAME


@dataclass(frozen=True)
class Case:
    """An alert evaluated on ``series`` at ``eval_time``: ``fires`` lists the labels of each alert
    expected (empty: silent)."""

    alert: str
    why: str
    eval_time: str
    series: dict[str, str]
    fires: list[dict[str, str]]


#: ``trainium_capacity=karpenter``: the NodePool the platform creates, an instance type and AZ ID.
KARPENTER = KarpenterCapacity(NODE_POOL_NAME, "trn1.32xlarge", "usw2-az4")
#: ``$<name>`` in alert_cases.yaml: Karpenter's series, named as the contract table names them.
KARPENTER_SERIES: dict[str, tuple[str, dict[str, str]]] = {
    "capacity_failures": (
        karpenter_metrics.NODECLAIMS_DISRUPTED_TOTAL,
        {
            "reason": karpenter_metrics.INSUFFICIENT_CAPACITY_REASON,
            "nodepool": NODE_POOL_NAME,
            "capacity_type": "on-demand",
        },
    ),
    "empty_disruptions": (
        karpenter_metrics.NODECLAIMS_DISRUPTED_TOTAL,
        {"reason": "empty", "nodepool": NODE_POOL_NAME, "capacity_type": "on-demand"},
    ),
    "build_info": (karpenter_metrics.BUILD_INFO, {"version": karpenter_metrics.VERSION}),
}


def _series(key: str) -> str:
    """``$<name>{labels}`` -> the named series with its fixed labels and these; others unchanged."""
    match = re.fullmatch(r"\$(\w+)\{(.*)\}", key)
    if match is None:
        return key
    metric, labels = KARPENTER_SERIES[match[1]]
    fixed = ", ".join(f'{name}="{value}"' for name, value in labels.items())
    return f"{metric}{{{fixed}, {match[2]}}}" if match[2] else f"{metric}{{{fixed}}}"


def _case(case: dict[str, Any]) -> Case:
    return Case(**{**case, "series": {_series(k): v for k, v in case["series"].items()}})


CASES = [_case(case) for case in yaml.safe_load((Path(__file__).parent / "alert_cases.yaml").read_text())]
#: Every alert, the one only ``trainium_capacity=karpenter`` deploys included.
ALL_ALERTS = alerts(training_namespace="training", karpenter_capacity=KARPENTER)


def _render(template: str, labels: dict[str, str]) -> str:
    return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m.group(1), ""), template)


def _deployed(groups: list[dict[str, Any]]) -> set[str]:
    return {r["alert"] for g in groups for r in g["rules"]}


def _unit_tests(groups: list[dict[str, Any]], alert_names: set[str] | None = None) -> dict[str, Any]:
    """promtool's unit tests of the cases of ``alert_names`` (default: every alert in ``groups``)."""
    rules = {r["alert"]: r for g in groups for r in g["rules"]}
    names = set(rules) if alert_names is None else alert_names
    tests = []
    for case in (c for c in CASES if c.alert in names):
        annotations = rules[case.alert]["annotations"]
        tests.append(
            {
                "name": f"{case.alert}: {case.why}",
                "interval": "1m",
                "input_series": [{"series": s, "values": v} for s, v in case.series.items()],
                "alert_rule_test": [
                    {
                        "eval_time": case.eval_time,
                        "alertname": case.alert,
                        "exp_alerts": [
                            {
                                "exp_labels": labels,
                                "exp_annotations": {k: _render(v, labels) for k, v in annotations.items()},
                            }
                            for labels in case.fires
                        ],
                    }
                ],
            }
        )
    return {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests}


def test_given_the_deployed_rules_then_promtool_accepts_them(platform_json, tmp_path):
    write_rules(tmp_path / "rules.yaml", deployed_rule_groups(platform_json))
    proc = promtool("check", "rules", "rules.yaml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # The default platform (Karpenter) deploys every alert, Karpenter's included.
    assert f"SUCCESS: {len(ALL_ALERTS)} rules found" in proc.stdout


def test_given_synthetic_series_then_each_alert_fires_when_it_should_and_stays_silent_otherwise(
    platform_json, nodegroup_platform_json, tmp_path
):
    groups = deployed_rule_groups(platform_json)
    # The default platform (Karpenter) deploys every alert; the fixed nodegroup all but Karpenter's.
    assert {c.alert for c in CASES} - _deployed(groups) == set()
    nodegroup = _deployed(deployed_rule_groups(nodegroup_platform_json))
    assert _deployed(groups) - nodegroup == {"TrainiumCapacityMissing"}
    write_rules(tmp_path / "rules.yaml", groups)
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(_unit_tests(groups), sort_keys=False))
    proc = promtool("test", "rules", "tests.yaml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_given_karpenter_capacity_then_the_capacity_alert_fires_on_failed_launches_only(tmp_path):
    groups = rule_groups(training_namespace="training", karpenter_capacity=KARPENTER)
    added = _deployed(groups) - {a.name for a in alerts(training_namespace="training")}
    assert added == {"TrainiumCapacityMissing"}
    write_rules(tmp_path / "rules.yaml", groups)
    tests = _unit_tests(groups, added)
    assert len(tests["tests"]) == len([c for c in CASES if c.alert in added])
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    proc = promtool("test", "rules", "tests.yaml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_given_karpenter_capacity_then_the_alert_names_the_instance_type_and_az_id_in_one_line():
    (alert,) = [a for a in ALL_ALERTS if a.name == "TrainiumCapacityMissing"]
    assert KARPENTER.instance_type in alert.summary and KARPENTER.az_id in alert.summary
    assert "\n" not in alert.summary and "{{" not in alert.summary
    assert f'nodepool="{KARPENTER.node_pool}"' in alert.expr
    for step in ("trainium_gang_wait_minutes", "vcctl job resume", "capacity_reservation_id", "make doctor"):
        assert step in alert.runbook, step


def test_given_the_case_series_then_karpenters_are_named_as_the_contract_names_them():
    labels = {e.name for e in karpenter_metrics.NODECLAIMS_DISRUPTED_LABELS.entries}
    reasons = {e.name for e in karpenter_metrics.DISRUPTION_REASONS.entries}
    for metric, fixed in KARPENTER_SERIES.values():
        if metric == karpenter_metrics.NODECLAIMS_DISRUPTED_TOTAL:
            assert set(fixed) == labels and fixed["reason"] in reasons
    raw = yaml.safe_load((Path(__file__).parent / "alert_cases.yaml").read_text())
    typed = [k for case in raw for k in case["series"] if k.startswith(("karpenter_", "$"))]
    assert typed and all(k.startswith("$") for k in typed)  # never spelled out in the YAML


def test_given_a_wrong_expectation_then_promtool_fails(platform_json, tmp_path):
    groups = deployed_rule_groups(platform_json)
    write_rules(tmp_path / "rules.yaml", groups)
    tests = _unit_tests(groups)
    tests["tests"] = [t for t in tests["tests"] if t["name"].startswith("TrainingStalled: a step")]
    tests["tests"][0]["alert_rule_test"][0]["exp_alerts"] = [{"exp_labels": {"severity": "critical"}}]
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests))
    assert promtool("test", "rules", "tests.yaml", cwd=tmp_path).returncode != 0


def test_given_every_alert_then_it_has_a_firing_case_and_a_silent_one():
    names = {a.name for a in ALL_ALERTS}
    assert {c.alert for c in CASES if c.fires} == names
    assert {c.alert for c in CASES if not c.fires} == names


@pytest.mark.parametrize("alert", ALL_ALERTS, ids=lambda a: a.name)
def test_given_an_alert_then_it_reads_only_emitted_series_and_says_what_to_do(alert):
    assert metric_names(alert.expr) <= set(CATALOG), metric_names(alert.expr) - set(CATALOG)
    rule = alert.rule()
    assert rule["labels"]["severity"] in ("warning", "critical")
    assert rule["annotations"]["summary"] and len(rule["annotations"]["runbook"]) > 40
    assert "\n" not in rule["annotations"]["runbook"]


def test_given_options_then_thresholds_follow_them(tmp_path):
    rules = {a.name: a for a in alerts(training_namespace="jobs", stall_minutes=30, fsx_free_percent=20)}
    assert rules["TrainingStalled"].expr.endswith("> 1800")
    assert rules["FsxFreeCapacityLow"].expr.endswith("< 0.2")
    assert 'namespace="jobs"' in rules["NeuronCoresIdle"].expr
    write_rules(Path(tmp_path) / "r.yaml", [{"name": "g", "rules": [a.rule() for a in rules.values()]}])
    assert promtool("check", "rules", "r.yaml", cwd=tmp_path).returncode == 0


def test_given_the_monitoring_docs_then_every_alert_is_listed():
    docs = (Path(__file__).resolve().parents[3] / "docs" / "monitoring.md").read_text()
    for alert in alerts(training_namespace="training"):
        assert f"| `{alert.name}` |" in docs, alert.name
