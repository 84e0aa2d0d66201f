"""The node health check on the platform: the pending taint on both kinds of Trainium capacity, the
device plugins that tolerate it, the training pods' gate, the DaemonSet, its RBAC, admission
policy and AWS role, and the configuration keys that turn it off."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pytest

from tests.contracts.nodes import EKS_TAINT_EFFECTS
from tests.support import (
    NODEGROUP,
    VARIANTS,
    helm_charts,
    k8s_manifests,
    resources,
    submitted_jobs,
    synth_platform,
    synth_training,
    validate_k8s,
)
from trainium_eks.addons.node_daemons import PRE_TRAINING_DAEMONS, manifest_daemons, on_trainium
from trainium_eks.config import config_from_context
from trainium_eks.nodes.health_checks import health_check_objects, terminate_conditions
from trainium_eks.versions import DEFAULT_KUBERNETES_VERSION
from trainium_job.errors import ConfigError
from trainium_job.instances import INSTANCE_FACTS, instance_facts
from trainium_job.node_health import CHECKS, HEALTH_LABEL, PENDING_TAINT, failed_taint
from trainium_job.pod_program import loads
from trainium_job.scheduling import NEURON_TAINT

TRN1 = instance_facts("trn1.32xlarge")
#: The labels a fresh Trainium node of each capacity mode carries that the check's affinity names.
FRESH_NODE = {"trainium-eks/pool": "trainium", "node.kubernetes.io/instance-type": TRN1.name}
# With the fixed nodegroup: the tests of these read its taints (Karpenter's: its NodePool).
OFF = {**NODEGROUP, "trainium_health_check": "false"}
NO_REPLACE = {**NODEGROUP, "trainium_health_replace": "false"}


def _objects(**kwargs: Any) -> dict[str, dict[str, Any]]:
    defaults = {"namespace": "training", "image": "img", "facts": TRN1, "replace": True}
    return {obj["kind"]: obj for obj in health_check_objects(**{**defaults, **kwargs})}


# Kubernetes' own matching rules (k8s.io/api core/v1 toleration.go ToleratesTaint; component-helpers
# nodeaffinity: every expression of a term must hold, DoesNotExist holds when the key is absent).
def _tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Mapping[str, str]) -> bool:
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint["effect"]:
            continue
        if t.get("key") and t["key"] != taint["key"]:
            continue
        if t.get("operator", "Equal") == "Exists" or t.get("value", "") == taint["value"]:
            return True
    return False


def _term_matches(term: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    for e in term["matchExpressions"]:
        present = e["key"] in labels
        if e["operator"] == "In" and not (present and labels[e["key"]] in e["values"]):
            return False
        if e["operator"] == "DoesNotExist" and present:
            return False
    return True


def _lands_on(pod_spec: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """The nodeSelector (every pair on the node) and the required node affinity both hold."""
    if any(labels.get(k) != v for k, v in pod_spec.get("nodeSelector", {}).items()):
        return False
    terms = pod_spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    return any(_term_matches(t, labels) for t in terms["nodeSelectorTerms"])


def _pod_spec(daemonset: Mapping[str, Any]) -> dict[str, Any]:
    return daemonset["spec"]["template"]["spec"]


def _volcano_pod(template: Mapping[str, Any]) -> dict[str, Any]:
    """The training pod, as the job's submitter creates its Volcano Job."""
    (job,) = submitted_jobs(template)
    return job["spec"]["tasks"][0]["template"]["spec"]


def _named(template: Mapping[str, Any], kind: str, name: str = "node-health-check") -> list[dict[str, Any]]:
    return [o for _, o in k8s_manifests(template) if o["kind"] == kind and o["metadata"]["name"] == name]


def _device_plugin_tolerations(template: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    charts = {c["Chart"]: c["Values"] for c in helm_charts(template).values()}
    return {
        "neuron": charts["neuron-helm-chart"]["devicePlugin"]["tolerations"],
        "efa": charts["aws-efa-k8s-device-plugin"]["tolerations"],
    }


def _nodegroup_taints(template: Mapping[str, Any]) -> list[dict[str, str]]:
    (trainium,) = [
        r["Properties"]
        for r in resources(template, "AWS::EKS::Nodegroup").values()
        if r["Properties"].get("Labels", {}).get("trainium-eks/pool") == "trainium"
    ]
    return [
        {"key": t["Key"], "value": t["Value"], "effect": EKS_TAINT_EFFECTS[t["Effect"]]}
        for t in trainium["Taints"]
    ]


def _terminate_statements(template: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        s
        for policy in resources(template, "AWS::IAM::Policy").values()
        for s in policy["Properties"]["PolicyDocument"]["Statement"]
        if s["Action"] == "ec2:TerminateInstances"
    ]


# --- the objects, unsynthesized ------------------------------------------------------------------


def test_given_the_check_objects_then_each_is_valid_for_the_default_kubernetes_version():
    for obj in _objects().values():
        validate_k8s(obj, DEFAULT_KUBERNETES_VERSION)


def test_given_the_daemonset_then_it_lands_on_unchecked_trainium_nodes_and_tolerates_only_pending():
    spec = _pod_spec(_objects()["DaemonSet"])
    assert _lands_on(spec, FRESH_NODE)
    assert not _lands_on(spec, {**FRESH_NODE, HEALTH_LABEL: "passed"})
    assert not _lands_on(spec, {**FRESH_NODE, HEALTH_LABEL: "failed"})
    assert not _lands_on(spec, {**FRESH_NODE, "node.kubernetes.io/instance-type": "trn2.48xlarge"})
    # Karpenter plans a node with karpenter.sh/initialized In [true] to sum its DaemonSets: the
    # check must not count there (it holds every device; no training pod would fit).
    assert not _lands_on(spec, {**FRESH_NODE, "karpenter.sh/initialized": "true"})
    assert _tolerates(spec["tolerations"], NEURON_TAINT)
    assert _tolerates(spec["tolerations"], PENDING_TAINT)
    assert not any(_tolerates(spec["tolerations"], failed_taint(check)) for check in CHECKS)


@pytest.mark.parametrize("name", sorted(INSTANCE_FACTS))
def test_given_an_instance_type_then_the_check_holds_all_its_neuron_devices(name):
    facts = instance_facts(name)
    (container,) = _pod_spec(_objects(facts=facts)["DaemonSet"])["containers"]
    for kind in ("requests", "limits"):
        assert container["resources"][kind]["aws.amazon.com/neuron"] == str(facts.neuron_devices)
    assert container["command"][container["command"].index("--instance-type") + 1] == name


def test_given_the_daemonset_then_it_runs_the_check_with_its_node_name_and_the_hosts_sys_read_only():
    spec = _pod_spec(_objects(image="training:1")["DaemonSet"])
    (container,) = spec["containers"]
    assert container["image"] == "training:1"
    assert container["command"] == [
        "python", "-m", "training.node.health_check", "--instance-type", TRN1.name,
        "--sysfs", "/host/sys/class/infiniband", "--state-dir", "/run/node-health", "--replace",
    ]  # fmt: skip
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in container[
        "env"
    ]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert set(mounts) == set(volumes) == {"sys", "state"}
    sys_mount, sys_volume = mounts["sys"], volumes["sys"]
    assert (sys_mount["mountPath"], sys_mount["readOnly"], sys_volume["hostPath"]["path"]) == (
        "/host/sys",
        True,
        "/sys",
    )
    # The verdict's bound runs from the pod's first start: the record of starts must outlive a
    # container's restart, which an emptyDir does and the container's own file system does not
    # (Kubernetes docs, concepts/storage/volumes, emptyDir: "The data in an emptyDir volume is
    # safe across container crashes").
    assert "emptyDir" in volumes["state"] and not mounts["state"].get("readOnly", False)
    assert mounts["state"]["mountPath"] == "/run/node-health"
    assert spec["serviceAccountName"] == "node-health-check" and spec["automountServiceAccountToken"] is True
    context = container["securityContext"]
    assert context["allowPrivilegeEscalation"] is False and context["privileged"] is False
    assert context["capabilities"]["drop"] == ["ALL"]
    no_replace = _pod_spec(_objects(replace=False)["DaemonSet"])["containers"][0]["command"]
    assert no_replace[-1] == "--no-replace"
    # Deleted as its label lands, the pod still sends its Events and the termination: more than
    # the 30 s Kubernetes gives a pod by default (core/v1 PodSpec terminationGracePeriodSeconds).
    assert spec["terminationGracePeriodSeconds"] > 30


def test_given_the_rbac_then_it_grants_nodes_get_and_patch_and_events_create_only():
    objects = _objects()
    assert objects["ClusterRole"]["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
    ]
    subjects = objects["ClusterRoleBinding"]["subjects"]
    # The check's, and the training job's: its fabric check marks a node it names.
    assert [(s["name"], s["namespace"]) for s in subjects] == [
        ("node-health-check", "training"),
        ("bert-trainer", "training"),
    ]


def test_given_the_admission_policy_then_it_binds_node_updates_by_the_check_and_the_training_account():
    objects = _objects(training_service_account="bert-trainer")
    spec = objects["ValidatingAdmissionPolicy"]["spec"]
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert (rule["resources"], rule["operations"]) == (["nodes"], ["UPDATE"])
    (condition,) = spec["matchConditions"]
    for user in (
        "system:serviceaccount:training:node-health-check",
        "system:serviceaccount:training:bert-trainer",
    ):
        assert f"'{user}'" in condition["expression"]
    assert spec["failurePolicy"] == "Fail"
    assert all(HEALTH_LABEL in v["expression"] for v in spec["variables"])
    binding = objects["ValidatingAdmissionPolicyBinding"]["spec"]
    assert (binding["policyName"], binding["validationActions"]) == ("node-health-check", ["Deny"])


def test_given_the_check_daemonset_then_the_node_budget_leaves_it_out_by_name_not_by_accident():
    daemonset = _objects()["DaemonSet"]
    # It would land on a Trainium node by the budget's own placement rule...
    assert on_trainium(_pod_spec(daemonset), TRN1.name)
    # ...and is left out only because it is listed as leaving before training lands.
    assert daemonset["metadata"]["name"] in PRE_TRAINING_DAEMONS
    assert manifest_daemons([daemonset], TRN1.name) == []


def test_given_either_capacity_then_termination_is_scoped_by_the_capacitys_own_tags():
    assert terminate_conditions(cluster_name="c", nodegroup_name="ng", node_pool=None) == {
        "StringEquals": {"aws:ResourceTag/eks:nodegroup-name": "ng", "aws:ResourceTag/eks:cluster-name": "c"}
    }
    assert terminate_conditions(cluster_name="c", nodegroup_name=None, node_pool="trainium") == {
        "StringEquals": {
            "aws:ResourceTag/karpenter.sh/nodepool": "trainium",
            "aws:ResourceTag/eks:eks-cluster-name": "c",
        }
    }


# --- configuration ---------------------------------------------------------------------------------


def test_given_default_configuration_then_the_check_and_replacement_are_on():
    config = config_from_context({})
    assert (config.trainium_health_check, config.trainium_health_replace) == (True, True)
    assert config.node_health_replacement


@pytest.mark.parametrize(
    ("context", "check", "replacement"),
    [
        (OFF, False, False),
        (NO_REPLACE, True, False),
        # The platform's half does not read training_enabled (a training-only switch leaves the
        # platform template alone, tests/stacks/test_training_stack.py).
        ({"training_enabled": "false"}, True, True),
    ],
)
def test_given_a_switch_off_then_what_it_turns_off(context, check, replacement):
    config = config_from_context(context)
    assert (config.trainium_health_check, config.node_health_replacement) == (check, replacement)


@pytest.mark.parametrize("key", ["trainium_health_check", "trainium_health_replace"])
def test_given_a_non_boolean_then_the_key_is_named(key):
    with pytest.raises(ConfigError, match=key):
        config_from_context({key: "maybe"})


# --- the synthesized stacks ------------------------------------------------------------------------


def test_given_the_nodegroup_platform_then_new_trainium_nodes_wait_for_the_check():
    platform = synth_platform(**NODEGROUP)
    assert PENDING_TAINT in _nodegroup_taints(platform)
    for plugin, tolerations in _device_plugin_tolerations(platform).items():
        assert _tolerates(tolerations, PENDING_TAINT), plugin
    training = synth_training(**NODEGROUP)
    (daemonset,) = _named(training, "DaemonSet")
    assert daemonset["metadata"]["namespace"] == "training"
    # Nodegroup mode: the training pods also require the passed label, and never tolerate the
    # pending or a failed taint.
    pod = _volcano_pod(training)
    assert pod["nodeSelector"][HEALTH_LABEL] == "passed"
    assert not any(_tolerates(pod["tolerations"], t) for t in (PENDING_TAINT, *map(failed_taint, CHECKS)))


def test_given_karpenter_mode_then_the_pending_taint_is_a_startup_taint_and_pods_require_no_label():
    platform = synth_platform(**VARIANTS["karpenter"])
    (pool,) = [
        o
        for _, o in k8s_manifests(platform)
        if o["kind"] == "NodePool" and o["metadata"]["name"] == "trainium"
    ]
    assert pool["spec"]["template"]["spec"]["startupTaints"] == [PENDING_TAINT]
    assert PENDING_TAINT not in pool["spec"]["template"]["spec"]["taints"]
    # Karpenter launches no node for a pod requiring a label its NodePool does not define.
    pod = _volcano_pod(synth_training(**VARIANTS["karpenter"]))
    assert HEALTH_LABEL not in pod["nodeSelector"]
    assert not _tolerates(pod["tolerations"], PENDING_TAINT)


@pytest.mark.parametrize(
    ("variant", "tags"),
    [
        ("nodegroup", {"eks:nodegroup-name", "eks:cluster-name"}),
        ("karpenter", {"karpenter.sh/nodepool", "eks:eks-cluster-name"}),
    ],
)
def test_given_replacement_then_terminate_is_the_roles_only_action_scoped_to_the_trainium_capacity(
    variant, tags
):
    platform = synth_platform(**VARIANTS[variant])
    (statement,) = _terminate_statements(platform)
    conditions = statement["Condition"]["StringEquals"]
    assert set(conditions) == {f"aws:ResourceTag/{tag}" for tag in tags}
    if variant == "karpenter":
        assert conditions["aws:ResourceTag/karpenter.sh/nodepool"] == "trainium"
    else:
        (nodegroup_id,) = [
            k
            for k, r in resources(platform, "AWS::EKS::Nodegroup").items()
            if r["Properties"].get("Labels", {}).get("trainium-eks/pool") == "trainium"
        ]
        assert conditions["aws:ResourceTag/eks:nodegroup-name"] == {
            "Fn::GetAtt": [nodegroup_id, "NodegroupName"]
        }
    (association,) = [
        a["Properties"]
        for a in resources(platform, "AWS::EKS::PodIdentityAssociation").values()
        if a["Properties"]["ServiceAccount"] == "node-health-check"
    ]
    assert association["Namespace"] == "training"


def _verdict_line(template: Mapping[str, Any]) -> list[str]:
    """The fabric check's verdict command of the training pods' program (its description)."""
    (container,) = _volcano_pod(template)["containers"]
    check = loads(container["command"][-1]).fabric_check
    assert check is not None and "training.node.fabric_check" in check.verdict
    return list(check.verdict)


@pytest.mark.parametrize(
    ("context", "flags"),
    [
        (NODEGROUP, ["--heal", "replace"]),  # a 2-node failure goes back to the deep check
        (NO_REPLACE, ["--heal", "taint"]),
        ({}, ["--heal", "replace", "--no-recheck"]),  # the default, Karpenter
        (OFF, []),  # as before the check: the job aborts
    ],
    ids=["nodegroup", "nodegroup no-replace", "default", "nodegroup off"],
)
def test_given_the_check_settings_then_the_fabric_check_heals_accordingly(context, flags):
    training = synth_training(**context)
    line = _verdict_line(training)
    found = [a for a in line if a in ("--heal", "replace", "taint", "--no-recheck", "--recheck")]
    assert found == flags, line
    # The API token only where the check marks a node (in-cluster config reads it).
    assert _volcano_pod(training)["automountServiceAccountToken"] is bool(flags)


def test_given_replacement_then_the_training_pods_share_the_checks_role_to_replace_a_node_they_name():
    platform = synth_platform()
    by_account = {
        a["Properties"]["ServiceAccount"]: a["Properties"]
        for a in resources(platform, "AWS::EKS::PodIdentityAssociation").values()
        if a["Properties"]["ServiceAccount"] in ("node-health-check", "bert-trainer")
    }
    assert set(by_account) == {"node-health-check", "bert-trainer"}
    assert by_account["node-health-check"]["RoleArn"] == by_account["bert-trainer"]["RoleArn"]


def test_given_the_check_off_then_nothing_of_it_is_deployed():
    platform, training = synth_platform(**OFF), synth_training(**OFF)
    assert PENDING_TAINT not in _nodegroup_taints(platform)
    assert all(not _tolerates(t, PENDING_TAINT) for t in _device_plugin_tolerations(platform).values())
    assert _terminate_statements(platform) == []
    assert _named(training, "DaemonSet") == [] and _named(training, "ValidatingAdmissionPolicy") == []
    assert HEALTH_LABEL not in _volcano_pod(training)["nodeSelector"]


def test_given_replacement_off_then_the_check_only_taints_and_has_no_aws_role():
    platform, training = synth_platform(**NO_REPLACE), synth_training(**NO_REPLACE)
    assert PENDING_TAINT in _nodegroup_taints(platform)
    assert _terminate_statements(platform) == []
    assert not [
        a for a in resources(platform, "AWS::EKS::PodIdentityAssociation").values()
        if a["Properties"]["ServiceAccount"] == "node-health-check"
    ]  # fmt: skip
    (daemonset,) = _named(training, "DaemonSet")
    assert _pod_spec(daemonset)["containers"][0]["command"][-1] == "--no-replace"
