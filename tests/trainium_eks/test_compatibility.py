"""The Kubernetes-version compatibility table decides the default version, or the review warns."""

from __future__ import annotations

import pytest

from trainium_eks.compatibility import (
    KUBERNETES_COMPATIBILITY,
    PINS,
    components,
    declared,
    newest_compatible_version,
    not_compatible,
)
from trainium_eks.config import config_from_context
from trainium_eks.report.review import platform_review
from trainium_eks.versions import DEFAULT_KUBERNETES_VERSION, KUBERNETES_RELEASES


@pytest.mark.parametrize("component", sorted(KUBERNETES_COMPATIBILITY))
def test_given_a_component_then_every_kubernetes_version_has_a_cell_with_a_source(component):
    row = KUBERNETES_COMPATIBILITY[component]
    assert set(row) == set(KUBERNETES_RELEASES)
    assert all(len(cell.source) > 30 for cell in row.values())


def test_given_the_pins_then_every_chart_and_managed_add_on_has_a_row():
    charts = {k for k, p in PINS.items() if p.repository is not None}
    managed = {k for k, p in PINS.items() if p.managed}
    assert charts | managed | {"kubectl-layer", "neuron-ami"} == set(components())
    assert charts | {"kubectl-layer", "neuron-ami"} == set(KUBERNETES_COMPATIBILITY)


def test_given_the_table_then_the_default_is_the_newest_version_every_component_supports():
    assert DEFAULT_KUBERNETES_VERSION == newest_compatible_version() == "1.35"
    assert not_compatible("1.35", components()) == []
    assert [c for c, _ in not_compatible("1.36", components())] == ["volcano"]


def test_given_a_version_without_evidence_for_a_managed_add_on_then_it_is_not_compatible():
    assert not declared("node-monitoring-agent", "1.34").compatible
    assert declared("node-monitoring-agent", "1.35").compatible


def test_given_1_36_then_the_review_warns_about_volcano_with_its_source():
    review = platform_review(config_from_context({"kubernetes_version": "1.36"}))
    (line,) = [line for line in review.splitlines() if "not declared compatible" in line]
    assert line.startswith("warning: volcano 1.15.0 is not declared compatible with Kubernetes 1.36: ")
    assert "volcano-sh/volcano@" in line and "README.md" in line


def test_given_the_default_version_then_the_review_has_no_compatibility_warning():
    assert "not declared compatible" not in platform_review(config_from_context({}))
