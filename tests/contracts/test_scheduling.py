"""Node selectors, tolerations and resource names: every pod the stacks create lands on a
nodegroup that exists for it, asks only for resources something advertises, and the device
plugins and the CSI node plugin run wherever pods need them."""

from __future__ import annotations

from tests.contracts.charts import DAEMONSETS, SELECTOR_PATHS
from tests.contracts.check import (
    _at,
    check_resource_names,
    check_selector_labels,
    daemonset_tolerations,
    placement,
)
from tests.contracts.emitted import Nodegroup, charts, containers, manifests, nodegroups, pod_specs
from tests.contracts.nodes import tolerates


def _groups(where: str) -> list[Nodegroup]:
    """The nodegroups of the configuration ``where`` belongs to (its platform stack's)."""
    variant = where.split(" / ")[0]
    return [g for g in nodegroups() if g.where.split(" / ")[0] == variant]


def _pods():
    for emitted in manifests()[:-1]:  # the TorchX job: same pod as each configuration's job (tested)
        for pod in pod_specs(emitted.body):
            yield emitted.where, pod


def test_given_every_pod_then_a_nodegroup_carries_its_labels_and_it_tolerates_that_groups_taints():
    problems = []
    for where, pod in _pods():
        selector, tolerations = pod.get("nodeSelector", {}), pod.get("tolerations", [])
        problems += [f"{where}: {p}" for p in check_selector_labels(selector, _groups(where))]
        if not placement(selector, tolerations, _groups(where)):
            problems.append(f"{where}: no nodegroup can take this pod (selector {selector})")
    assert problems == []


def test_given_every_toleration_of_our_pods_then_it_matches_a_taint_a_nodegroup_sets():
    problems = [
        f"{where}: toleration {t} matches no nodegroup taint"
        for where, pod in _pods()
        for t in pod.get("tolerations", [])
        if not any(tolerates(t, taint) for g in _groups(where) for taint in (*g.taints, *g.startup_taints))
    ]
    assert problems == []


def test_given_every_pod_and_queue_then_each_resource_name_is_advertised():
    names = [
        (where, name)
        for where, pod in _pods()
        for c in containers(pod)
        for part in ("requests", "limits")
        for name in c.get("resources", {}).get(part, {})
    ]
    names += [
        (m.where, name)
        for m in manifests()
        if m.body["kind"] == "Queue"
        for name in m.body["spec"].get("capability", {})
    ]
    assert [f"{where}: {p}" for where, name in names for p in check_resource_names([name])] == []


def test_given_every_chart_selector_then_a_nodegroup_carries_its_labels():
    problems = []
    for release in charts():
        for path in SELECTOR_PATHS.get(release.chart, ()):
            selector = _at(release.values, path) or {}
            problems += [
                f"{release.where} {path}: {p}"
                for p in check_selector_labels(selector, _groups(release.where))
            ]
            if selector and not any(
                all(g.labels.get(k) == v or v in g.instance_types for k, v in selector.items())
                for g in _groups(release.where)
            ):
                problems.append(f"{release.where} {path}: no nodegroup matches {selector}")
    assert problems == []


#: Which chart DaemonSet a pod needs on its node: Neuron devices, EFA interfaces, the FSx claim.
NEEDS = (
    ("aws.amazon.com/neuron", "neuron-helm-chart", "device plugin"),
    ("vpc.amazonaws.com/efa", "aws-efa-k8s-device-plugin", "device plugin"),
    ("fsx-claim", "aws-fsx-csi-driver", "node plugin"),
)


def test_given_pods_that_need_devices_or_fsx_then_the_serving_daemonset_runs_where_they_land():
    problems = []
    checked = set()
    for where, pod in _pods():
        text = str(pod)
        groups = _groups(where)
        landing = placement(pod.get("nodeSelector", {}), pod.get("tolerations", []), groups)
        releases = {r.chart: r for r in charts() if r.where.split(" / ")[0] == where.split(" / ")[0]}
        for need, chart, daemonset in NEEDS:
            if need not in text:
                continue
            checked.add(chart)
            release = releases.get(chart)
            if release is None:
                problems.append(f"{where}: needs {need} but {chart} is not installed")
                continue
            rule = DAEMONSETS[chart][daemonset]
            serves = placement(
                _at(release.values, rule.selector) or {},
                daemonset_tolerations(chart, daemonset, release.values),
                groups,
            )
            missing = [g.where for g in landing if g not in serves]
            if missing:
                problems.append(f"{where}: {chart} {daemonset} does not run on {missing} ({rule.source})")
    assert checked == {chart for _, chart, _ in NEEDS}
    assert problems == []


def test_given_the_charts_default_tolerations_then_the_model_renders_them():
    assert daemonset_tolerations("aws-fsx-csi-driver", "node plugin", {}) == [{"operator": "Exists"}]
    assert daemonset_tolerations(
        "aws-efa-k8s-device-plugin", "device plugin", {"tolerations": [{"key": "k"}]}
    ) == [
        {"key": "CriticalAddonsOnly", "operator": "Exists"},
        {"key": "k"},
    ]
    neuron_default = daemonset_tolerations("neuron-helm-chart", "device plugin", {})
    assert {"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoSchedule"} in neuron_default
