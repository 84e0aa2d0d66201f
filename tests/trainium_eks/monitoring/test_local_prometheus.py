"""A real Prometheus scrapes a real CPU training run: every training panel's query has an answer."""

from __future__ import annotations

import pytest

from tests.trainium_eks.monitoring.local_prometheus import scraped_training_run
from tests.trainium_eks.monitoring.panels import plot_panels
from tests.trainium_eks.monitoring.promtool import GRAFANA_VARIABLES
from trainium_eks.monitoring.dashboard import RUN_PANELS, queries


def _substituted(expr: str) -> str:
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    return expr


@pytest.fixture(scope="module")
def scraped(shards, held_out, tmp_path_factory):
    with scraped_training_run(tmp_path_factory.mktemp("local-prometheus"), shards, held_out) as run:
        yield run


@pytest.mark.parametrize(
    "title, expr", queries(RUN_PANELS), ids=[f"{t}/{i}" for i, (t, _) in enumerate(queries(RUN_PANELS))]
)
def test_given_a_scraped_cpu_run_then_the_training_panel_query_has_results(scraped, title, expr):
    result = scraped.prometheus.query(_substituted(expr), at=scraped.end)
    assert result, f"{title}: {expr} returned nothing"
    assert all(float(r["value"][1]) >= 0 for r in result)


def test_given_a_scraped_cpu_run_then_steps_advance_and_loss_is_a_training_loss(scraped):
    steps = scraped.prometheus.query_range("max(bert_train_step)", scraped.start, scraped.end)
    values = [float(v) for _, v in steps[0]["values"]]
    assert values == sorted(values) and values[-1] - values[0] >= 20
    (loss,) = scraped.prometheus.query("max(bert_train_loss)", at=scraped.end)
    assert 0 < float(loss["value"][1]) < 20  # MLM + NSP cross-entropy of a 400-piece vocabulary


def test_given_the_range_results_then_the_panel_picture_is_drawn(scraped, tmp_path):
    out = plot_panels(scraped, tmp_path / "panels.png")
    assert out.stat().st_size > 10_000
