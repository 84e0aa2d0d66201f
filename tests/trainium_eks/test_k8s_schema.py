"""Every Kubernetes object the stacks apply is valid for the pinned cluster version.

Core objects are validated (strict: unknown fields fail) against the OpenAPI schema of the default
Kubernetes version with kubernetes-validate. Custom resources have no schema there; they are checked against the
rules of their CRD in :data:`CUSTOM_RESOURCES` below. A custom resource with no entry fails: add
its CRD's rules when you add the object.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import kubernetes_validate
import pytest

from tests.contracts.karpenter import NODE_CLASS_FIELDS, NODE_POOL_FIELDS, Field, spec_problems
from tests.support import ALL_OPTIONS, PREPARATION_ON, k8s_manifests, synth_app, validate_k8s
from trainium_eks.versions import DEFAULT_KUBERNETES_VERSION

# Quantity pattern of `x-kubernetes-int-or-string` resource lists in the Volcano CRDs.
_QUANTITY = re.compile(
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)


def _quantities(value: Any) -> bool:
    return isinstance(value, dict) and all(
        isinstance(q, int) or (isinstance(q, str) and _QUANTITY.match(q)) for q in value.values()
    )


def _int32(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -(2**31) <= value < 2**31


@dataclass(frozen=True)
class CrdRules:
    """What a CRD's structural schema demands of an object (the parts our objects use)."""

    #: "Cluster" or "Namespaced".
    scope: str
    #: spec field -> check. With ``closed``, other spec fields are errors (the API server would
    #: prune them silently).
    spec_fields: dict[str, Callable[[Any], bool]]
    closed: bool = True
    #: Extra checks: (description, check(object) -> bool).
    checks: tuple[tuple[str, Callable[[dict], bool]], ...] = ()


def _pod_template_valid(template: Any) -> bool:
    # A Volcano task template is a core PodTemplateSpec: validate it as one.
    validate_k8s(
        {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "task"}, "template": template},
        DEFAULT_KUBERNETES_VERSION,
    )
    return True


def _tasks_valid(tasks: Any) -> bool:
    if not isinstance(tasks, list) or not tasks:
        return False
    names = [task.get("name") for task in tasks]
    return (
        len(set(names)) == len(names)
        and all(isinstance(n, str) and n for n in names)
        and all(_int32(task.get("replicas", 0)) and task.get("replicas", 0) >= 0 for task in tasks)
        and all(_pod_template_valid(task["template"]) for task in tasks)
    )


#: PodMonitor and PrometheusRule: the CRDs of prometheus-operator 0.93.1 as kube-prometheus-stack
#: 88.5.3 ships them (charts/kube-prometheus-stack/charts/crds/crds/crd-podmonitors.yaml and
#: crd-prometheusrules.yaml, annotation operator.prometheus.io/version 0.93.1): the field names of
#: spec, of podMetricsEndpoints[] and of a RelabelConfig, the relabel actions, portNumber 1-65535,
#: groups[].name and rules[].expr required, the duration pattern of rules[].for.
_POD_MONITOR_SPEC = {
    "attachMetadata", "bodySizeLimit", "convertClassicHistogramsToNHCB", "fallbackScrapeProtocol", "jobLabel",
    "keepDroppedTargets", "labelLimit", "labelNameLengthLimit", "labelValueLengthLimit", "namespaceSelector",
    "nativeHistogramBucketLimit", "nativeHistogramMinBucketFactor", "podMetricsEndpoints", "podTargetLabels",
    "sampleLimit", "scrapeClass", "scrapeClassicHistograms", "scrapeNativeHistograms", "scrapeProtocols",
    "selector", "selectorMechanism", "targetLimit",
}  # fmt: skip
_POD_METRICS_ENDPOINT = {
    "authorization", "basicAuth", "bearerTokenSecret", "enableHttp2", "filterRunning", "followRedirects",
    "honorLabels", "honorTimestamps", "interval", "metricRelabelings", "noProxy", "oauth2", "params", "path",
    "port", "portNumber", "proxyConnectHeader", "proxyFromEnvironment", "proxyUrl", "relabelings", "scheme",
    "scrapeTimeout", "targetPort", "tlsConfig", "trackTimestampsStaleness",
}  # fmt: skip
_RELABEL_CONFIG = {"action", "modulus", "regex", "replacement", "separator", "sourceLabels", "targetLabel"}
_RELABEL_ACTIONS = {
    "replace", "keep", "drop", "hashmod", "labelmap", "labeldrop", "labelkeep", "lowercase", "uppercase",
    "keepequal", "dropequal",
}  # fmt: skip
_RULE_GROUP = {"interval", "labels", "limit", "name", "partial_response_strategy", "query_offset", "rules"}
_RULE = {"alert", "annotations", "expr", "for", "keep_firing_for", "labels", "record"}
_DURATION = re.compile(
    r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
)


def _relabelings_valid(items: Any) -> bool:
    return isinstance(items, list) and all(
        isinstance(r, dict)
        and set(r) <= _RELABEL_CONFIG
        and r.get("action", "replace").lower() in _RELABEL_ACTIONS
        for r in items
    )


def _endpoints_valid(endpoints: Any) -> bool:
    return isinstance(endpoints, list) and all(
        isinstance(e, dict)
        and set(e) <= _POD_METRICS_ENDPOINT
        and ("port" in e or "portNumber" in e)
        and (not isinstance(e.get("portNumber"), bool) and 1 <= e.get("portNumber", 1) <= 65535)
        and _relabelings_valid(e.get("relabelings", []))
        for e in endpoints
    )


def _string_map(value: Any) -> bool:
    return isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    )


def _rule_valid(rule: Any) -> bool:
    return (
        isinstance(rule, dict)
        and set(rule) <= _RULE
        and isinstance(rule.get("expr"), str)
        and (("alert" in rule) != ("record" in rule))
        and bool(_DURATION.match(rule.get("for", "0")))
        and _string_map(rule.get("labels", {}))
        and _string_map(rule.get("annotations", {}))
    )


def _groups_valid(groups: Any) -> bool:
    return isinstance(groups, list) and all(
        isinstance(g, dict)
        and set(g) <= _RULE_GROUP
        and isinstance(g.get("name"), str)
        and all(_rule_valid(r) for r in g.get("rules", []))
        for g in groups
    )


#: Sources: volcano-sh/volcano installer/helm/chart/volcano/crd/bases/
#: scheduling.volcano.sh_queues.yaml (v1beta1: cluster-scoped; no required fields; `weight` int32,
#: `capability`/`deserved` quantity maps, `reclaimable` boolean, `priority` int32, `parent`/`type`
#: strings) and batch.volcano.sh_jobs.yaml (v1alpha1: namespaced; `tasks[].template` is a
#: PodTemplateSpec; `minSuccess` minimum 1; int32 counters).
def _karpenter_rules(fields: tuple[Field, ...], *, free: tuple[str, ...]) -> CrdRules:
    """Cluster-scoped; each top-level spec field (a table path's first part) as the table accepts it."""

    def accepted(name: str) -> Callable[[Any], bool]:
        def check(value: Any) -> bool:
            problems = spec_problems({name: value}, fields, free)
            assert not problems, problems
            return True

        return check

    tops = {re.split(r"[.\[]", f.path, maxsplit=1)[0] for f in fields}
    return CrdRules(scope="Cluster", spec_fields={name: accepted(name) for name in sorted(tops)})


CUSTOM_RESOURCES: dict[tuple[str, str], CrdRules] = {
    ("scheduling.volcano.sh/v1beta1", "Queue"): CrdRules(
        scope="Cluster",
        spec_fields={
            "weight": lambda v: _int32(v) and v >= 1,
            "capability": _quantities,
            "deserved": _quantities,
            "reclaimable": lambda v: isinstance(v, bool),
            "priority": _int32,
            "parent": lambda v: isinstance(v, str),
            "type": lambda v: isinstance(v, str),
        },
    ),
    ("batch.volcano.sh/v1alpha1", "Job"): CrdRules(
        scope="Namespaced",
        spec_fields={
            "tasks": _tasks_valid,
            "minAvailable": _int32,
            "minSuccess": lambda v: _int32(v) and v >= 1,
            "maxRetry": _int32,
            "queue": lambda v: isinstance(v, str),
            "schedulerName": lambda v: isinstance(v, str),
            "priorityClassName": lambda v: isinstance(v, str),
            "plugins": lambda v: (
                isinstance(v, dict)
                and all(isinstance(a, list) and all(isinstance(s, str) for s in a) for a in v.values())
            ),
        },
        # Only the fields above are checked; the CRD has more (policies, volumes, ...).
        closed=False,
        checks=(("spec.tasks is required by the job controller", lambda o: "tasks" in o.get("spec", {})),),
    ),
    ("monitoring.coreos.com/v1", "PodMonitor"): CrdRules(
        scope="Namespaced",
        spec_fields={
            **{name: (lambda v: v is not None) for name in _POD_MONITOR_SPEC},
            "selector": lambda v: isinstance(v, dict) and set(v) <= {"matchLabels", "matchExpressions"},
            "namespaceSelector": lambda v: isinstance(v, dict) and set(v) <= {"any", "matchNames"},
            "podMetricsEndpoints": _endpoints_valid,
        },
        checks=(("spec.selector is required", lambda o: "selector" in o.get("spec", {})),),
    ),
    ("monitoring.coreos.com/v1", "PrometheusRule"): CrdRules(
        scope="Namespaced",
        spec_fields={"groups": _groups_valid},
    ),
    # Karpenter's, by the field tables read from its CRDs at v1.14.1 (tests/contracts/karpenter.py).
    ("karpenter.sh/v1", "NodePool"): _karpenter_rules(NODE_POOL_FIELDS, free=("template.metadata.labels.",)),
    ("karpenter.k8s.aws/v1", "EC2NodeClass"): _karpenter_rules(NODE_CLASS_FIELDS, free=("tags.",)),
}


def check_custom_resource(obj: dict[str, Any]) -> None:
    """Raise AssertionError if ``obj`` breaks its CRD's rules (or has no entry)."""
    key = (obj["apiVersion"], obj["kind"])
    assert key in CUSTOM_RESOURCES, f"{key}: no schema and no CRD rules; add them to CUSTOM_RESOURCES"
    rules = CUSTOM_RESOURCES[key]
    metadata = obj.get("metadata", {})
    assert isinstance(metadata.get("name"), str) and metadata["name"], f"{key}: metadata.name"
    if rules.scope == "Cluster":
        assert "namespace" not in metadata, f"{key} is cluster-scoped: no metadata.namespace"
    else:
        assert metadata.get("namespace"), f"{key} is namespaced: set metadata.namespace"
    spec = obj.get("spec", {})
    for field_name, value in spec.items():
        if field_name in rules.spec_fields:
            assert rules.spec_fields[field_name](value), f"{key}: spec.{field_name} = {value!r}"
        else:
            assert not rules.closed, f"{key}: spec.{field_name} is not in the CRD (would be pruned)"
    for description, check in rules.checks:
        assert check(obj), f"{key}: {description}"


def _objects(templates: dict[str, dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for stack, template in sorted(templates.items()):
        for logical_id, obj in k8s_manifests(template):
            yield f"{stack}/{logical_id}/{obj['kind']}/{obj.get('metadata', {}).get('name')}", obj


def _assert_valid(obj: dict[str, Any]) -> None:
    try:
        validate_k8s(obj, DEFAULT_KUBERNETES_VERSION)
    except kubernetes_validate.SchemaNotFoundError:
        check_custom_resource(obj)


def _assert_all_valid(objects) -> None:
    """Every (name, object) valid; the failures all listed, first line of each."""
    failures = []
    for name, obj in objects:
        try:
            _assert_valid(obj)
        except (AssertionError, kubernetes_validate.ValidationError) as err:
            failures.append(f"{name}: {str(err).splitlines()[0]}")
    assert not failures, "\n".join(failures)


def test_given_default_app_then_every_applied_object_is_valid_for_kubernetes_1_36(default_synth):
    objects = list(_objects(default_synth.templates))
    assert len(objects) >= 5  # the Queue and etcd's objects at least
    _assert_all_valid(objects)


def test_given_every_add_on_option_on_then_every_applied_object_is_valid():
    _assert_all_valid(_objects(synth_app(**ALL_OPTIONS)))


def test_given_dataset_preparation_on_then_every_applied_object_is_valid():

    objects = list(_objects(synth_app(**PREPARATION_ON)))
    assert any(o["kind"] == "Job" and o["spec"].get("completionMode") == "Indexed" for _, o in objects)
    _assert_all_valid(objects)


def test_given_the_pinned_version_then_kubernetes_validate_has_its_schema():
    assert DEFAULT_KUBERNETES_VERSION == "1.35"
    # An unknown field in a core object must fail: strict validation is on.
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_k8s(
            {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"}, "spec": {"port": 1}},
            DEFAULT_KUBERNETES_VERSION,
        )


QUEUE = {
    "apiVersion": "scheduling.volcano.sh/v1beta1",
    "kind": "Queue",
    "metadata": {"name": "training"},
    "spec": {"weight": 1, "reclaimable": False, "capability": {"cpu": "256", "memory": "1024Gi"}},
}


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda q: q["metadata"].update(namespace="training"), "cluster-scoped"),
        (lambda q: q["spec"].update(weight=0), "spec.weight"),
        (lambda q: q["spec"].update(reclaimable="false"), "spec.reclaimable"),
        (lambda q: q["spec"]["capability"].update(memory="1 TB"), "spec.capability"),
        (lambda q: q["spec"].update(capacity={}), "not in the CRD"),
        (lambda q: q.update(kind="Queues"), "no schema and no CRD rules"),
    ],
)
def test_given_a_broken_queue_then_the_crd_check_fails(mutate, message):
    queue = {
        **QUEUE,
        "metadata": dict(QUEUE["metadata"]),
        "spec": {**QUEUE["spec"], "capability": dict(QUEUE["spec"]["capability"])},
    }
    check_custom_resource(queue)  # the original passes
    mutate(queue)
    with pytest.raises(AssertionError, match=message):
        check_custom_resource(queue)


def test_given_a_volcano_job_with_a_bad_pod_template_then_the_check_fails():
    job = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "bert", "namespace": "training"},
        "spec": {
            "queue": "training",
            "minAvailable": 2,
            "tasks": [
                {
                    "name": "worker",
                    "replicas": 2,
                    "template": {"spec": {"containers": [{"name": "w", "image": "i"}]}},
                }
            ],
        },
    }
    check_custom_resource(job)
    job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resource"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        check_custom_resource(job)


POD_MONITOR = {
    "apiVersion": "monitoring.coreos.com/v1",
    "kind": "PodMonitor",
    "metadata": {"name": "m", "namespace": "monitoring"},
    "spec": {
        "selector": {"matchLabels": {"app": "x"}},
        "podMetricsEndpoints": [
            {"portNumber": 8000, "relabelings": [{"sourceLabels": ["a"], "targetLabel": "b"}]}
        ],
    },
}


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda m: m["spec"].pop("selector"), "selector is required"),
        (lambda m: m["spec"]["podMetricsEndpoints"][0].update(portNumber=70000), "podMetricsEndpoints"),
        (lambda m: m["spec"]["podMetricsEndpoints"][0].update(portName="x"), "podMetricsEndpoints"),
        (
            lambda m: m["spec"]["podMetricsEndpoints"][0]["relabelings"][0].update(action="rename"),
            "podMetricsEndpoints",
        ),
        (lambda m: m["spec"].update(endpoints=[]), "not in the CRD"),
    ],
)
def test_given_a_broken_pod_monitor_then_the_crd_check_fails(mutate, message):
    import copy

    monitor = copy.deepcopy(POD_MONITOR)
    check_custom_resource(monitor)
    mutate(monitor)
    with pytest.raises(AssertionError, match=message):
        check_custom_resource(monitor)


@pytest.mark.parametrize(
    "rule",
    [
        {"alert": "A", "expr": "up", "for": "5 minutes"},
        {"expr": "up"},
        {"alert": "A", "record": "r", "expr": "up"},
    ],
)
def test_given_a_broken_prometheus_rule_then_the_crd_check_fails(rule):
    obj = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "r", "namespace": "monitoring"},
        "spec": {"groups": [{"name": "g", "rules": [{"alert": "A", "expr": "up", "for": "5m"}]}]},
    }
    check_custom_resource(obj)
    obj["spec"]["groups"][0]["rules"] = [rule]
    with pytest.raises(AssertionError, match="spec.groups"):
        check_custom_resource(obj)
