"""The node health check's ValidatingAdmissionPolicy, run by a real CEL engine against Node updates.

The policy fails closed: an expression that errors, or a rule that refuses the check's own patch,
would keep every Trainium node tainted. Here each variable and validation is compiled and
evaluated by cel-expr-python (Google's binding of cel-cpp) in an environment shaped like the API
server's for admission policies (kubernetes/kubernetes
staging/src/k8s.io/apiserver/pkg/admission/plugin/cel/compile.go ``createEnvForOpts``, commit
081353bf8ad9: ``object`` and ``oldObject`` are dyn; ``variables.<name>`` holds the policy's
variables), with CEL optional types enabled as Kubernetes' base environment does (same repository,
staging/src/k8s.io/apiserver/pkg/cel/environment/base.go L98-L105, commit 002315b9745c:
``cel.OptionalTypes()`` introduced at compatibility version 1.28, so on from Kubernetes 1.29).

The updates are the check's own (``training.node.node_actions``: the label merged, the taints
replaced by ``health_taints``) and the ones the policy exists to refuse.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from cel_expr_python import cel
from cel_expr_python.ext import ext_optional

from tests.support import validate_k8s
from training.node.node_actions import health_taints
from trainium_eks.nodes.health_checks import admission_policy, health_check_objects
from trainium_eks.versions import DEFAULT_KUBERNETES_VERSION
from trainium_job.instances import instance_facts
from trainium_job.node_health import FAILED, HEALTH_LABEL, PASSED, PENDING_TAINT, failed_taint
from trainium_job.scheduling import NEURON_TAINT

NAMESPACE = "training"
TRN1 = instance_facts("trn1.32xlarge")
NODE_NAME = "ip-10-0-12-34.us-west-2.compute.internal"
#: The user names and groups the API server gives the two writers' service account tokens
#: (https://kubernetes.io/docs/reference/access-authn-authz/authentication/#service-account-tokens:
#: system:serviceaccount:<namespace>:<name>, groups system:serviceaccounts and
#: system:serviceaccounts:<namespace>); the training job's is its default, bert-trainer.
CHECK_USER = f"system:serviceaccount:{NAMESPACE}:node-health-check"
TRAINING_USER = f"system:serviceaccount:{NAMESPACE}:bert-trainer"
SA_GROUPS = ["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}", "system:authenticated"]
#: Messages of the policy's validations (what ``kubectl`` prints when one denies).
LABELS_DENIED = "only the trainium-eks/node-health label may change"
TAINTS_DENIED = (
    "only taints with the keys trainium-eks/node-health, trainium-eks/node-health-failed may change"
)
ANNOTATIONS_DENIED = "annotations may not change"
SPEC_DENIED = "the node's spec may not change but its health taints"


def _policy() -> dict[str, Any]:
    objects = health_check_objects(namespace=NAMESPACE, image="img", facts=TRN1, replace=True)
    (policy,) = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicy"]
    return policy["spec"]


POLICY = _policy()
ENV = cel.NewEnv(
    variables={name: cel.Type.DYN for name in ("object", "oldObject", "request", "variables")},
    extensions=[ext_optional.ExtOptional()],
)


def _eval(expression: str, data: Mapping[str, Any]) -> Any:
    """``expression``'s value; a CEL error fails the test (in the API server it would deny the
    update whatever it was: failurePolicy Fail)."""
    result = ENV.compile(expression).eval(data=dict(data))
    assert result.type() != cel.Type.ERROR, f"{expression!r} failed: {result.value()}"
    return result.plain_value()


def _denials(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Messages of the validations that refuse ``old`` -> ``new``, the variables bound first."""
    data: dict[str, Any] = {"object": new, "oldObject": old, "variables": {}}
    for variable in POLICY["variables"]:
        data["variables"][variable["name"]] = _eval(variable["expression"], data)
    denied = []
    for validation in POLICY["validations"]:
        verdict = _eval(validation["expression"], data)
        assert isinstance(verdict, bool), f"{validation['expression']!r} gave {verdict!r}, not a bool"
        if not verdict:
            denied.append(validation["message"])
    return denied


def _node(*taints: Mapping[str, Any], health: str | None = None) -> dict[str, Any]:
    """A trn1.32xlarge node of a managed nodegroup as the API server returns it: well-known and
    EKS labels, the kubelet's and the node controller's annotations, its AWS provider ID."""
    labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/instance-type": TRN1.name,
        "beta.kubernetes.io/os": "linux",
        "eks.amazonaws.com/capacityType": "ON_DEMAND",
        "eks.amazonaws.com/nodegroup": "trainium",
        "eks.amazonaws.com/nodegroup-image": "ami-0123456789abcdef0",
        "failure-domain.beta.kubernetes.io/region": "us-west-2",
        "failure-domain.beta.kubernetes.io/zone": "us-west-2d",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": NODE_NAME,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": TRN1.name,
        "topology.k8s.aws/zone-id": "usw2-az4",
        "topology.kubernetes.io/region": "us-west-2",
        "topology.kubernetes.io/zone": "us-west-2d",
        "trainium-eks/pool": "trainium",
    }
    if health is not None:
        labels[HEALTH_LABEL] = health
    node: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": NODE_NAME,
            "uid": "0b7e4a52-6f1c-4a8e-9d51-3f2a9c4e7b10",
            "resourceVersion": "48213",
            "creationTimestamp": "2026-11-30T08:00:00Z",
            "labels": labels,
            "annotations": {
                "alpha.kubernetes.io/provided-node-ip": "10.0.12.34",
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": {"providerID": "aws:///us-west-2d/i-0123456789abcdef0"},
    }
    if taints:
        node["spec"]["taints"] = [dict(t) for t in taints]
    return node


#: The node lifecycle controller's taint while the kubelet has not reported Ready (NoExecute
#: taints carry the time they were added).
NOT_READY = {
    "key": "node.kubernetes.io/not-ready",
    "effect": "NoExecute",
    "timeAdded": "2026-11-30T08:00:04Z",
}
FRESH = _node(NEURON_TAINT, NOT_READY, PENDING_TAINT)


def _verdict(node: Mapping[str, Any], label: str | None, taint: Mapping[str, str] | None) -> dict[str, Any]:
    """``node`` after the check's strategic-merge patch (``node_actions._patch_verdict``): the
    health label set (None: removed), the taint list replaced by ``health_taints`` (a list
    without a merge key is replaced whole; an empty one is omitted from the stored Node)."""
    new = copy.deepcopy(dict(node))
    labels = new["metadata"]["labels"]
    if label is None:
        labels.pop(HEALTH_LABEL, None)
    else:
        labels[HEALTH_LABEL] = label
    taints = health_taints(node["spec"].get("taints") or [], taint)
    new["spec"].pop("taints", None)
    if taints:
        new["spec"]["taints"] = taints
    new["metadata"]["resourceVersion"] = str(int(node["metadata"]["resourceVersion"]) + 1)
    return new


def _edited(node: Mapping[str, Any], path: Sequence[str], value: Any) -> dict[str, Any]:
    """``node`` with ``path`` set to ``value`` (None: removed)."""
    new = copy.deepcopy(dict(node))
    *parents, leaf = path
    target = new
    for part in parents:
        target = target.setdefault(part, {})
    if value is None:
        target.pop(leaf, None)
    else:
        target[leaf] = value
    return new


PASSED_NODE = _verdict(FRESH, PASSED, None)
FAILED_NODE = _verdict(FRESH, FAILED, failed_taint("compute"))

ALLOWED = {
    "pending-taint-replaced-by-passed-label": (FRESH, PASSED_NODE),
    "failed-label-and-failed-compute-taint": (FRESH, FAILED_NODE),
    "recheck-label-removed-pending-taint-back": (PASSED_NODE, _verdict(PASSED_NODE, None, PENDING_TAINT)),
    "recheck-of-a-failed-node": (FAILED_NODE, _verdict(FAILED_NODE, None, PENDING_TAINT)),
    "only-taint-was-pending": (_node(PENDING_TAINT), _verdict(_node(PENDING_TAINT), PASSED, None)),
    "no-change-at-all": (FRESH, copy.deepcopy(FRESH)),
}

DENIED = {
    "another-label-added": (
        FRESH,
        _edited(PASSED_NODE, ("metadata", "labels", "node-role.kubernetes.io/worker"), ""),
        LABELS_DENIED,
    ),
    "another-label-changed": (
        FRESH,
        _edited(PASSED_NODE, ("metadata", "labels", "trainium-eks/pool"), "cpu"),
        LABELS_DENIED,
    ),
    "another-label-removed": (
        FRESH,
        _edited(PASSED_NODE, ("metadata", "labels", "node.kubernetes.io/instance-type"), None),
        LABELS_DENIED,
    ),
    "neuron-taint-removed": (
        FRESH,
        _edited(
            PASSED_NODE, ("spec", "taints"), [t for t in PASSED_NODE["spec"]["taints"] if t != NEURON_TAINT]
        ),
        TAINTS_DENIED,
    ),
    "foreign-taint-added": (
        FRESH,
        _edited(
            PASSED_NODE,
            ("spec", "taints"),
            [
                *PASSED_NODE["spec"]["taints"],
                {"key": "example.com/drain", "value": "true", "effect": "NoExecute"},
            ],
        ),
        TAINTS_DENIED,
    ),
    "annotation-changed": (
        FRESH,
        _edited(PASSED_NODE, ("metadata", "annotations", "node.alpha.kubernetes.io/ttl"), "15"),
        ANNOTATIONS_DENIED,
    ),
    "cordoned": (FRESH, _edited(PASSED_NODE, ("spec", "unschedulable"), True), SPEC_DENIED),
    "provider-id-changed": (
        FRESH,
        _edited(PASSED_NODE, ("spec", "providerID"), "aws:///us-west-2d/i-0fedcba9876543210"),
        SPEC_DENIED,
    ),
    # The rest of core/v1 NodeSpec besides taints (k8s.io/api core/v1 types.go NodeSpec:
    # podCIDR, podCIDRs, providerID, unschedulable, taints, configSource, externalID), each
    # set where the Node had none: the routes a node's pods get, its kubelet's configuration
    # source, its external ID.
    "pod-cidr-set": (FRESH, _edited(PASSED_NODE, ("spec", "podCIDR"), "10.244.7.0/24"), SPEC_DENIED),
    "pod-cidrs-set": (
        FRESH,
        _edited(PASSED_NODE, ("spec", "podCIDRs"), ["10.244.7.0/24", "fd00:10:244:7::/64"]),
        SPEC_DENIED,
    ),
    "config-source-set": (
        FRESH,
        _edited(
            PASSED_NODE,
            ("spec", "configSource"),
            {"configMap": {"name": "kubelet", "namespace": "kube-system", "kubeletConfigKey": "kubelet"}},
        ),
        SPEC_DENIED,
    ),
    "external-id-set": (
        FRESH,
        _edited(PASSED_NODE, ("spec", "externalID"), "i-0fedcba9876543210"),
        SPEC_DENIED,
    ),
}


@pytest.mark.parametrize(("old", "new"), ALLOWED.values(), ids=ALLOWED.keys())
def test_given_a_health_verdict_or_no_change_when_the_policy_evaluates_it_then_every_validation_holds(
    old, new
):
    assert _denials(old, new) == []


@pytest.mark.parametrize(("old", "new", "message"), DENIED.values(), ids=DENIED.keys())
def test_given_a_change_besides_the_health_label_and_taints_when_the_policy_evaluates_it_then_it_is_denied(
    old, new, message
):
    assert _denials(old, new) == [message]


@pytest.mark.parametrize(
    "pair", [*ALLOWED.values(), *((old, new) for old, new, _ in DENIED.values())], ids=[*ALLOWED, *DENIED]
)
def test_given_the_test_nodes_then_they_are_valid_nodes_of_the_default_kubernetes_version(pair):
    for node in pair:
        validate_k8s(node, DEFAULT_KUBERNETES_VERSION)


def test_given_the_admission_policy_then_it_and_its_binding_are_valid_objects_of_the_default_version():
    # Built here, not at import: the policy's objects as the API server's schema checks them
    # (strict: a misspelt or unknown field fails too), the binding naming the policy
    policy, binding = admission_policy(users=[CHECK_USER, TRAINING_USER])
    assert (policy["kind"], binding["kind"]) == (
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    )
    for obj in (policy, binding):
        validate_k8s(obj, DEFAULT_KUBERNETES_VERSION)
    assert binding["spec"]["policyName"] == policy["metadata"]["name"] == binding["metadata"]["name"]
    assert policy["metadata"]["labels"] == binding["metadata"]["labels"] != {}
    # And it matches updates of the nodes these tests are: Node is in the core group, named ""
    # in a rule, at the version of their apiVersion (a rule of another group or version matches
    # no Node update, and the check's writers would be unbounded)
    group, _, version = FRESH["apiVersion"].rpartition("/")
    assert policy["spec"]["matchConstraints"]["resourceRules"] == [
        {"apiGroups": [group], "apiVersions": [version], "operations": ["UPDATE"], "resources": ["nodes"]}
    ]


def _request(username: str, groups: Sequence[str]) -> dict[str, Any]:
    """The admission request of a Node PATCH (admission.k8s.io/v1 AdmissionRequest fields)."""
    gvk = {"group": "", "version": "v1", "kind": "Node"}
    gvr = {"group": "", "version": "v1", "resource": "nodes"}
    return {
        "kind": gvk,
        "resource": gvr,
        "requestKind": gvk,
        "requestResource": gvr,
        "name": NODE_NAME,
        "operation": "UPDATE",
        "userInfo": {
            "username": username,
            "uid": "5f0c2d1e-8a3b-4c7d-9e6f-1a2b3c4d5e6f",
            "groups": list(groups),
        },
        "dryRun": False,
    }


@pytest.mark.parametrize(
    ("username", "groups", "matches"),
    [
        (CHECK_USER, SA_GROUPS, True),
        (TRAINING_USER, SA_GROUPS, True),
        (f"system:serviceaccount:{NAMESPACE}:default", SA_GROUPS, False),
        (f"system:node:{NODE_NAME}", ["system:nodes", "system:authenticated"], False),
        ("kubernetes-admin", ["system:masters", "system:authenticated"], False),
    ],
    ids=["health-check", "training-job", "other-service-account", "kubelet", "admin"],
)
def test_given_a_node_update_by_a_user_when_the_match_condition_evaluates_then_only_the_two_writers_match(
    username, groups, matches
):
    (condition,) = POLICY["matchConditions"]
    data = {"object": PASSED_NODE, "oldObject": FRESH, "request": _request(username, groups)}
    assert _eval(condition["expression"], data) is matches


def test_given_the_policy_then_its_optional_field_selections_need_the_optional_types_kubernetes_enables():
    """Without CEL optional types the spec validation does not compile: the expressions rely on a
    language option, not on the core language."""
    plain = cel.NewEnv(variables={"object": cel.Type.DYN, "oldObject": cel.Type.DYN})
    (spec_rule,) = [v["expression"] for v in POLICY["validations"] if v["message"] == SPEC_DENIED]
    assert ".?" in spec_rule
    with pytest.raises(RuntimeError, match=r"unsupported syntax '\.\?'"):
        plain.compile(spec_rule)
