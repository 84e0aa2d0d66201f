"""The alert rules as deployed: valid for promtool 2.42, each firing when it should and silent on a
healthy run (promtool test rules on synthetic series), each with a summary and a runbook line."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.trainium_eks.monitoring.deployed import deployed_rule_groups
from tests.trainium_eks.monitoring.promtool import metric_names, promtool, write_rules
from trainium_eks.monitoring.catalog import CATALOG
from trainium_eks.monitoring.rules import alerts


@dataclass(frozen=True)
class Case:
    """An alert evaluated on ``series`` at ``eval_time``: ``fires`` lists the labels of each alert
    expected (empty: silent)."""

    alert: str
    why: str
    eval_time: str
    series: dict[str, str]
    fires: list[dict[str, str]]


CASES = [Case(**case) for case in yaml.safe_load((Path(__file__).parent / "alert_cases.yaml").read_text())]


def _render(template: str, labels: dict[str, str]) -> str:
    return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m.group(1), ""), template)


def _unit_tests(groups: list[dict[str, Any]]) -> dict[str, Any]:
    rules = {r["alert"]: r for g in groups for r in g["rules"]}
    tests = []
    for case in CASES:
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
    assert f"SUCCESS: {len(alerts(training_namespace='training'))} rules found" in proc.stdout


def test_given_synthetic_series_then_each_alert_fires_when_it_should_and_stays_silent_otherwise(
    platform_json, tmp_path
):
    groups = deployed_rule_groups(platform_json)
    write_rules(tmp_path / "rules.yaml", groups)
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(_unit_tests(groups), sort_keys=False))
    proc = promtool("test", "rules", "tests.yaml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_given_a_wrong_expectation_then_promtool_fails(platform_json, tmp_path):
    groups = deployed_rule_groups(platform_json)
    write_rules(tmp_path / "rules.yaml", groups)
    tests = _unit_tests(groups)
    tests["tests"] = [t for t in tests["tests"] if t["name"].startswith("TrainingStalled: a step")]
    tests["tests"][0]["alert_rule_test"][0]["exp_alerts"] = [{"exp_labels": {"severity": "critical"}}]
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests))
    assert promtool("test", "rules", "tests.yaml", cwd=tmp_path).returncode != 0


def test_given_every_alert_then_it_has_a_firing_case_and_a_silent_one():
    names = {a.name for a in alerts(training_namespace="training")}
    assert {c.alert for c in CASES if c.fires} == names
    assert {c.alert for c in CASES if not c.fires} == names


@pytest.mark.parametrize("alert", alerts(training_namespace="training"), ids=lambda a: a.name)
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
