"""Every Helm values key the stacks set is one its chart reads at the pinned version."""

from __future__ import annotations

from tests.contracts.charts import CHART_VALUES
from tests.contracts.check import check_chart_values
from tests.contracts.emitted import charts


def test_given_every_configuration_then_each_chart_has_a_table_and_reads_every_key_we_set():
    releases = charts()
    assert {r.chart for r in releases} >= {
        "aws-fsx-csi-driver",
        "volcano",
        "neuron-helm-chart",
        "aws-efa-k8s-device-plugin",
    }
    assert [f"{r.where}: {p}" for r in releases for p in check_chart_values(r.chart, r.values)] == []


def test_given_each_release_then_its_table_is_for_the_pinned_chart_version():
    assert {(r.chart, r.version.lstrip("v")) for r in charts()} == {
        (name, table.version.lstrip("v")) for name, table in CHART_VALUES.items()
    }


def test_given_a_misspelled_or_unknown_key_then_the_check_fails():
    assert check_chart_values("aws-fsx-csi-driver", {"node": {"tolerateAllTaint": True}}) == [
        "chart aws-fsx-csi-driver 1.17.0: values key 'node.tolerateAllTaint' is not one the chart reads"
    ]
    assert check_chart_values("volcano", {"custom": {"default_ns": {"any/label": "x"}}}) == []
    assert check_chart_values("volcano", {"basic": {"image_pull_policy": "Sometimes"}})
    assert check_chart_values("some-other-chart", {})[0].startswith("chart some-other-chart: no values table")
