"""Karpenter mode against Karpenter 1.14.1: the objects as its CRDs validate them, the IAM policy
against the one it publishes, the interruption queue, and a node launched by it against a node of
the managed nodegroup (the two modes must not drift)."""

from __future__ import annotations

import base64
import json
import re
import subprocess
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from tests.support import (
    REPO,
    VARIANTS,
    VENV_BIN,
    helm_charts,
    k8s_manifests,
    resources,
    synth_platform,
    synth_training,
)
from trainium_eks.config import config_from_context
from trainium_eks.node_fit import node_fit
from trainium_job.instances import INSTANCE_FACTS, instance_facts

from .karpenter import (
    DO_NOT_DISRUPT,
    KARPENTER_ALLOCATABLE,
    NODE_CLASS_FIELDS,
    NODE_POOL_FIELDS,
    OMITTED_STATEMENTS,
    PUBLISHED_INTERRUPTION_EVENTS,
    PUBLISHED_QUEUE,
    PUBLISHED_STATEMENTS,
    WELL_KNOWN_REQUIREMENT_KEYS,
    Field,
)
from .nodes import EKS_TAINT_EFFECTS

#: The platform stack of each pair of configurations whose nodes must be the same.
PAIRS = {
    "default": ("default", "karpenter"),
    "capacity block": ("capacity block", "karpenter capacity block"),
}


def _platform(variant: str) -> dict[str, Any]:
    return synth_platform(**VARIANTS[variant])


def _objects(template: Mapping[str, Any], kind: str) -> list[dict[str, Any]]:
    return [obj for _, obj in k8s_manifests(template) if obj["kind"] == kind]


def _one(template: Mapping[str, Any], kind: str, name: str = "trainium") -> dict[str, Any]:
    (found,) = [obj for obj in _objects(template, kind) if obj["metadata"]["name"] == name]
    return found


def _leaves(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item, f"{path}[]")
    else:
        yield path, value


def _problems(spec: Mapping[str, Any], fields: tuple[Field, ...], free: tuple[str, ...]) -> list[str]:
    table = {f.path: f for f in fields}
    problems = []
    for path, value in _leaves(spec):
        field = table.get(path)
        if field is None:
            if not any(path.startswith(prefix) for prefix in free):
                problems.append(f"{path}: not a field of the table")
            continue
        text = str(value)
        placeholder = text.startswith(("REF_", "ATT_", "FN_"))
        if field.enum and text not in field.enum:
            problems.append(f"{path}={text!r}: not one of {field.enum} ({field.source})")
        if field.pattern and not placeholder and not re.search(field.pattern, text):
            problems.append(f"{path}={text!r}: does not match {field.pattern} ({field.source})")
    return problems


@pytest.mark.parametrize("pool_name", ["trainium", "dataset"])
@pytest.mark.parametrize("variant", ["karpenter", "karpenter capacity block"])
def test_given_karpenter_mode_then_each_field_is_one_the_crds_accept(variant, pool_name):
    template = _platform(variant)
    pool, node_class = _one(template, "NodePool", pool_name), _one(template, "EC2NodeClass", pool_name)
    assert _problems(pool["spec"], NODE_POOL_FIELDS, ("template.metadata.labels.",)) == []
    assert _problems(node_class["spec"], NODE_CLASS_FIELDS, ("tags.",)) == []
    assert pool["spec"]["template"]["spec"]["nodeClassRef"]["name"] == node_class["metadata"]["name"]
    keys = {r["key"] for r in pool["spec"]["template"]["spec"]["requirements"]}
    assert keys <= set(WELL_KNOWN_REQUIREMENT_KEYS)


def test_given_a_bad_value_then_the_field_check_names_it():
    bad = {"disruption": {"consolidateAfter": "10 minutes", "consolidationPolicy": "WhenIdle"}, "extra": 1}
    assert len(_problems(bad, NODE_POOL_FIELDS, ())) == 3


def _controller_policy(template: Mapping[str, Any]) -> list[dict[str, Any]]:
    (policy,) = [
        p
        for logical_id, p in resources(template, "AWS::IAM::Policy").items()
        if logical_id.startswith("TrainiumPoolKarpenterControllerRole")
    ]
    return policy["Properties"]["PolicyDocument"]["Statement"]


def test_given_the_published_policy_then_each_statement_has_its_actions_and_each_omission_a_reason():
    statements = _controller_policy(_platform("karpenter"))
    emitted = {
        s["Sid"]: frozenset([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
        for s in statements
    }
    assert {sid: emitted[sid] for sid in emitted} == {sid: PUBLISHED_STATEMENTS[sid] for sid in emitted}
    assert set(PUBLISHED_STATEMENTS) - set(emitted) == set(OMITTED_STATEMENTS)


def test_given_the_policy_then_launches_name_only_this_pools_subnet_groups_and_placement_group():
    statements = {s["Sid"]: s for s in _controller_policy(_platform("karpenter"))}
    launch = statements["AllowScopedEC2InstanceAccessActions"]["Resource"]
    text = str(launch)
    assert "subnet/*" not in text and "security-group/*" not in text and "placement-group/*" not in text
    assert "capacity-reservation" not in text
    blocked = str(_controller_policy(_platform("karpenter capacity block")))
    assert "capacity-reservation/cr-0123456789abcdef0" in blocked
    for sid in ("AllowScopedEC2LaunchTemplateAccessActions", "AllowScopedDeletion"):
        equals = statements[sid]["Condition"]["StringEquals"]
        assert list(equals) == ["aws:ResourceTag/eks:eks-cluster-name"]


def test_given_the_interruption_queue_then_it_and_its_rules_are_as_published():
    template = _platform("karpenter")
    ((queue_id, queue),) = [
        (k, q)
        for k, q in resources(template, "AWS::SQS::Queue").items()
        if k.startswith("TrainiumPoolKarpenter")
    ]
    assert {k: queue["Properties"].get(k) for k in PUBLISHED_QUEUE} == PUBLISHED_QUEUE
    rules = [
        r["Properties"]
        for r in resources(template, "AWS::Events::Rule").values()
        if any(t["Arn"] == {"Fn::GetAtt": [queue_id, "Arn"]} for t in r["Properties"]["Targets"])
    ]
    events = {(r["EventPattern"]["source"][0], r["EventPattern"]["detail-type"][0]) for r in rules}
    assert events == PUBLISHED_INTERRUPTION_EVENTS
    chart = next(c for c in helm_charts(template).values() if c["Chart"] == "karpenter")
    assert chart["Values"]["settings"]["interruptionQueue"] == f"ATT_{queue_id}_QueueName"


# --- the two modes give the same node -------------------------------------------------------


def _nodegroup_node(template: Mapping[str, Any]) -> dict[str, Any]:
    """What a node of the Trainium nodegroup gets, from the nodegroup and its launch template."""
    (group,) = [g for k, g in resources(template, "AWS::EKS::Nodegroup").items() if k.startswith("Trainium")]
    props = group["Properties"]
    (lt,) = [
        t for k, t in resources(template, "AWS::EC2::LaunchTemplate").items() if k.startswith("Trainium")
    ]
    data = lt["Properties"]["LaunchTemplateData"]
    (root,) = data["BlockDeviceMappings"]
    interfaces = data["NetworkInterfaces"]
    reservation = data.get("CapacityReservationSpecification", {}).get("CapacityReservationTarget", {})
    return {
        "ami": ("AL2023 Neuron" if props["AmiType"] == "AL2023_x86_64_NEURON" else props["AmiType"]),
        "ami_release": props["ReleaseVersion"].rsplit("-", 1)[1],
        "instance_type": data["InstanceType"],
        "subnets": [f"REF_{subnet['Ref']}" for subnet in props["Subnets"]],
        "interfaces": [
            (n["NetworkCardIndex"], n["DeviceIndex"], n.get("InterfaceType", "interface")) for n in interfaces
        ],
        "groups_per_interface": [_groups(template, n["Groups"]) for n in interfaces],
        "placement_strategy": _placement_strategy(template, data["Placement"]["GroupName"]),
        "imds": (
            data["MetadataOptions"]["HttpTokens"],
            data["MetadataOptions"]["HttpPutResponseHopLimit"],
            data["MetadataOptions"]["HttpEndpoint"],
        ),
        "root_volume": (
            root["DeviceName"],
            root["Ebs"]["VolumeType"],
            root["Ebs"]["VolumeSize"],
            root["Ebs"]["Encrypted"],
            root["Ebs"]["DeleteOnTermination"],
        ),
        "user_data": base64.b64decode(data["UserData"]).decode() if "UserData" in data else None,
        "labels": props["Labels"],
        "taints": [
            {"key": t["Key"], "value": t["Value"], "effect": EKS_TAINT_EFFECTS[t["Effect"]]}
            for t in props["Taints"]
        ],
        "name_tag": data["TagSpecifications"][0]["Tags"][0]["Value"],
        "reservation": reservation.get("CapacityReservationId"),
        "capacity_block": data.get("InstanceMarketOptions", {}).get("MarketType") == "capacity-block",
        "repair": props["NodeRepairConfig"]["Enabled"],
    }


def _karpenter_node(template: Mapping[str, Any], facts_name: str) -> dict[str, Any]:
    """What a node Karpenter launches for a training pod (which requests every EFA) gets, read
    through Karpenter's own rules (the sources in tests/contracts/karpenter.py)."""
    pool, node_class = _one(template, "NodePool"), _one(template, "EC2NodeClass")
    spec, node = node_class["spec"], pool["spec"]["template"]
    requirements = {r["key"]: r["values"] for r in node["spec"]["requirements"]}
    groups = [term["id"] for term in spec["securityGroupSelectorTerms"]]
    facts = instance_facts(facts_name)
    if "networkInterfaces" in spec:
        interfaces = [
            (n["networkCardIndex"], n["deviceIndex"], n["interfaceType"]) for n in spec["networkInterfaces"]
        ]
    else:  # EFA_AUTO_LAYOUT_SOURCE: one efa interface per EFA the type supports
        interfaces = [(card, 0 if card == 0 else 1, "efa") for card in range(facts.efa_interfaces)]
    (root,) = spec["blockDeviceMappings"]
    family, release = spec["amiSelectorTerms"][0]["alias"].split("@")
    chart = next(c for c in helm_charts(template).values() if c["Chart"] == "karpenter")
    reservation = [t["id"] for t in spec.get("capacityReservationSelectorTerms", [])]
    return {
        # NEURON_VARIANT_SOURCE: the al2023 family's Neuron variant for an accelerated type.
        "ami": "AL2023 Neuron" if family == "al2023" and facts.neuron_devices else family,
        "ami_release": release.lstrip("v"),
        "instance_type": requirements["node.kubernetes.io/instance-type"][0],
        "subnets": [term["id"] for term in spec["subnetSelectorTerms"]],
        "interfaces": interfaces,
        "groups_per_interface": [_groups(template, groups) for _ in interfaces],
        "placement_strategy": _placement_strategy(template, spec["placementGroupSelector"]["name"]),
        "imds": (
            spec["metadataOptions"]["httpTokens"],
            spec["metadataOptions"]["httpPutResponseHopLimit"],
            spec["metadataOptions"]["httpEndpoint"],
        ),
        "root_volume": (
            root["deviceName"],
            root["ebs"]["volumeType"],
            int(root["ebs"]["volumeSize"].removesuffix("Gi")),
            root["ebs"]["encrypted"],
            root["ebs"]["deleteOnTermination"],
        ),
        "user_data": spec.get("userData"),
        "labels": node["metadata"]["labels"],
        # A node gets the NodePool's taints and its startupTaints at registration
        # (kubernetes-sigs/karpenter v1.14.1 pkg/apis/v1/nodeclaim.go L28-38).
        "taints": [*node["spec"]["taints"], *node["spec"].get("startupTaints", [])],
        "name_tag": spec["tags"]["Name"],
        "reservation": reservation[0] if reservation else None,
        # A Capacity Block is launched as one when its reservation is one (launchtemplate/types.go
        # L151-180); the NodePool must allow the "reserved" capacity type to use it.
        "capacity_block": bool(reservation) and requirements["karpenter.sh/capacity-type"] == ["reserved"],
        "repair": chart["Values"]["settings"]["featureGates"]["nodeRepair"],
    }


def _groups(template: Mapping[str, Any], refs: list[Any]) -> list[str]:
    """Each security group as what it is: the cluster's, or one that allows all to/from itself."""
    kinds = []
    for ref in refs:
        text = str(ref)
        if "ClusterSecurityGroupId" in text:
            kinds.append("cluster")
            continue
        logical_id = re.search(r"(?:ATT_|'Fn::GetAtt': \[')(\w+?)(?:_GroupId|')", text)
        assert logical_id, text
        self_ref = {"Fn::GetAtt": [logical_id.group(1), "GroupId"]}
        rules = [
            r["Properties"]
            for kind in ("AWS::EC2::SecurityGroupIngress", "AWS::EC2::SecurityGroupEgress")
            for r in resources(template, kind).values()
            if r["Properties"].get("GroupId") == self_ref
        ]
        ingress = [r for r in rules if r.get("SourceSecurityGroupId") == self_ref]
        egress = [r for r in rules if r.get("DestinationSecurityGroupId") == self_ref]
        inline = template["Resources"][logical_id.group(1)]["Properties"]
        others = [*inline.get("SecurityGroupIngress", []), *[r for r in rules if r not in ingress + egress]]
        all_traffic = all(r["IpProtocol"] == "-1" for r in ingress + egress)
        only_itself = ingress and egress and all_traffic and not others
        kinds.append("efa (all to and from itself, nothing else)" if only_itself else f"other {text}")
    return sorted(kinds)


def _placement_strategy(template: Mapping[str, Any], ref: Any) -> str:
    logical_id = re.search(r"(?:ATT_|'Fn::GetAtt': \[')(\w+?)(?:_GroupName|')", str(ref))
    assert logical_id, ref
    return template["Resources"][logical_id.group(1)]["Properties"]["Strategy"]


@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_given_both_capacity_modes_then_a_trainium_node_gets_the_same_launch(pair):
    nodegroup_variant, karpenter_variant = PAIRS[pair]
    instance_type = VARIANTS[nodegroup_variant].get("instance_type", "trn1.32xlarge")
    nodegroup = _nodegroup_node(_platform(nodegroup_variant))
    karpenter = _karpenter_node(_platform(karpenter_variant), instance_type)
    assert karpenter == nodegroup


def test_given_a_drifted_node_class_then_the_comparison_sees_it():
    template = _platform("karpenter")
    node = _karpenter_node(template, "trn1.32xlarge")
    assert node != {**node, "imds": ("optional", 2, "enabled")}
    assert node["interfaces"][:2] == [(0, 0, "efa"), (1, 1, "efa")] and len(node["interfaces"]) == 8


# --- the workload in Karpenter mode ----------------------------------------------------------


def _volcano_job(template: Mapping[str, Any]) -> dict[str, Any]:
    (job,) = [
        obj
        for _, obj in k8s_manifests(template)
        if obj["kind"] == "Job" and obj["apiVersion"].startswith("batch.volcano.sh")
    ]
    return job


def test_given_karpenter_mode_then_training_pods_are_not_disrupted_and_a_stuck_gang_is_aborted():
    job = _volcano_job(synth_training(**VARIANTS["karpenter"]))
    pod = job["spec"]["tasks"][0]["template"]
    key, _ = DO_NOT_DISRUPT
    assert pod["metadata"]["annotations"] == {key: "true"}
    pending = [p for p in job["spec"]["policies"] if p.get("event") == "PodPending"]
    assert pending == [{"event": "PodPending", "action": "AbortJob", "timeout": "30m"}]


def test_given_the_nodegroup_mode_then_the_job_has_neither():
    job = _volcano_job(synth_training())
    assert "annotations" not in job["spec"]["tasks"][0]["template"]["metadata"]
    assert not [p for p in job["spec"]["policies"] if p.get("event") == "PodPending"]


def test_given_karpenter_mode_then_volcano_creates_pods_without_enqueue_and_keeps_the_charts_plugins():
    def volcano(variant: str) -> dict[str, Any]:
        return next(c for c in helm_charts(_platform(variant)).values() if c["Chart"] == "volcano")["Values"]

    assert "scheduler_config_override" not in volcano("default")["custom"]
    conf = volcano("karpenter")["custom"]["scheduler_config_override"]
    assert conf.splitlines()[0] == 'actions: "allocate, backfill"'
    plugins = re.findall(r"- name: (\w+)", conf)
    # volcano-sh/volcano v1.15.0 installer/helm/chart/volcano/config/volcano-scheduler.conf L3-15
    assert plugins == [
        "priority",
        "gang",
        "conformance",
        "overcommit",
        "drf",
        "predicates",
        "proportion",
        "nodeorder",
        "binpack",
    ]


def test_given_karpenter_with_monitoring_then_its_chart_comes_after_the_servicemonitor_crd():
    # The chart renders its ServiceMonitor only if monitoring.coreos.com/v1 is served when it is
    # installed (tests/contracts/karpenter_metrics.py, CHART_SERVICE_MONITOR): after the monitoring chart.
    template = _platform("karpenter")
    charts = {props["Chart"]: logical_id for logical_id, props in helm_charts(template).items()}
    karpenter = template["Resources"][charts["karpenter"]]
    assert charts["kube-prometheus-stack"] in karpenter["DependsOn"]
    assert helm_charts(template)[charts["karpenter"]]["Values"]["serviceMonitor"]["enabled"] is True


@pytest.mark.parametrize("variant", ["karpenter", "karpenter capacity block"])
def test_given_karpenter_mode_then_the_training_pod_and_the_daemons_fit_what_karpenter_takes_a_node_to_offer(
    variant,
):
    # Karpenter launches a node only for a pod it believes fits one; a pod a few MiB too big for
    # its model would wait for ever with no node launched.
    config = config_from_context(VARIANTS[variant])
    job = _volcano_job(synth_training(**VARIANTS[variant]))
    requests = job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resources"]["requests"]
    daemons = node_fit(config).daemon_requests
    cpu, memory, pods, neuron, efa = KARPENTER_ALLOCATABLE[config.instance_type]
    assert int(requests["cpu"].removesuffix("m")) + daemons.millicpu <= cpu
    assert int(requests["memory"].removesuffix("Mi")) + daemons.memory_mib <= memory
    assert 1 + daemons.pods <= pods
    assert int(requests["aws.amazon.com/neuron"]) <= neuron
    assert int(requests.get("vpc.amazonaws.com/efa", "0")) <= efa


def test_given_karpenter_mode_then_staging_runs_on_the_dataset_pool_not_on_trainium():
    template = synth_training(**VARIANTS["karpenter"])
    (staging,) = [
        o for _, o in k8s_manifests(template) if o["kind"] == "Job" and o["apiVersion"] == "batch/v1"
    ]
    pod = staging["spec"]["template"]["spec"]
    pool = _one(_platform("karpenter"), "NodePool", "dataset")["spec"]["template"]
    assert pod["nodeSelector"] == pool["metadata"]["labels"]
    assert [t["key"] for t in pod["tolerations"]] == [t["key"] for t in pool["spec"]["taints"]]
    requirements = {r["key"]: r["values"] for r in pool["spec"]["requirements"]}
    assert requirements["node.kubernetes.io/instance-type"][0] not in INSTANCE_FACTS  # not a Trainium type


def test_given_karpenter_mode_then_cfn_lint_finds_nothing(tmp_path):
    for variant in ("karpenter", "karpenter capacity block"):
        path = tmp_path / f"{variant.replace(' ', '-')}.template.json"
        path.write_text(json.dumps(_platform(variant)))
    proc = subprocess.run(
        [str(VENV_BIN / "cfn-lint"), "--format", "parseable", *sorted(str(p) for p in tmp_path.iterdir())],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
