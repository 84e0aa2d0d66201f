"""Karpenter mode against Karpenter 1.14.1: the objects as its CRDs validate them, the IAM policy
against the one it publishes, the interruption queue, and a node launched by it against a node of
the managed nodegroup (the two modes must not drift)."""

from __future__ import annotations

import base64
import dataclasses
import fnmatch
import itertools
import json
import re
import subprocess
import tarfile
from collections.abc import Mapping
from typing import Any

import pytest
from aws_cdk import App, Environment, Stack

from tests.contracts.karpenter import (
    CHART_CRDS_VERSION,
    CLUSTER_TAG_SUBSTITUTE,
    DO_NOT_DISRUPT,
    FINALIZER_IAM_CALLS,
    HELM_HANDLER_MEMBER,
    KARPENTER_ALLOCATABLE,
    M7I_12XLARGE_LABELS,
    NARROWED_CONDITIONS,
    NARROWED_RESOURCES,
    NODE_CLASS_FIELDS,
    NODE_POOL_FIELDS,
    NUMERIC_REQUIREMENT_KEYS,
    OMITTED_STATEMENTS,
    PUBLISHED_INTERRUPTION_EVENTS,
    PUBLISHED_POLICY,
    PUBLISHED_QUEUE,
    WELL_KNOWN_REQUIREMENT_KEYS,
    spec_problems,
)
from tests.contracts.nodes import EKS_TAINT_EFFECTS
from tests.support import (
    REPO,
    VARIANTS,
    VENV_BIN,
    _detokenize,
    helm_charts,
    k8s_manifests,
    resources,
    submitted_jobs,
    synth_platform,
    synth_training,
)
from trainium_eks.config import SUPPORTED_PARTITIONS, config_from_context
from trainium_eks.jobs.node_fit import node_fit
from trainium_eks.nodes import karpenter
from trainium_eks.nodes.karpenter import LaunchResources, controller_statements
from trainium_job.instances import INSTANCE_FACTS, instance_facts

#: A statement's actions, resources and conditions (operator -> key -> values).
Shape = tuple[frozenset[str], frozenset[str], dict[str, dict[str, frozenset[str]]]]

#: The platform stack of each pair of configurations whose nodes must be the same.
PAIRS = {
    "default": ("nodegroup", "karpenter"),
    "capacity block": ("nodegroup capacity block", "karpenter capacity block"),
}


def _platform(variant: str) -> dict[str, Any]:
    return synth_platform(**VARIANTS[variant])


def _objects(template: Mapping[str, Any], kind: str) -> list[dict[str, Any]]:
    return [obj for _, obj in k8s_manifests(template) if obj["kind"] == kind]


def _one(template: Mapping[str, Any], kind: str, name: str = "trainium") -> dict[str, Any]:
    (found,) = [obj for obj in _objects(template, kind) if obj["metadata"]["name"] == name]
    return found


@pytest.mark.parametrize("pool_name", ["trainium", "dataset", "preparation"])
@pytest.mark.parametrize("variant", ["karpenter", "karpenter capacity block"])
def test_given_karpenter_mode_then_each_field_is_one_the_crds_accept(variant, pool_name):
    template = _platform(variant)
    pool, node_class = _one(template, "NodePool", pool_name), _one(template, "EC2NodeClass", pool_name)
    assert spec_problems(pool["spec"], NODE_POOL_FIELDS, ("template.metadata.labels.",)) == []
    assert spec_problems(node_class["spec"], NODE_CLASS_FIELDS, ("tags.",)) == []
    assert pool["spec"]["template"]["spec"]["nodeClassRef"]["name"] == node_class["metadata"]["name"]
    requirements = pool["spec"]["template"]["spec"]["requirements"]
    assert {r["key"] for r in requirements} <= set(WELL_KNOWN_REQUIREMENT_KEYS)
    for r in requirements:
        if r["operator"] in ("Gt", "Lt", "Gte", "Lte"):
            assert r["key"] in NUMERIC_REQUIREMENT_KEYS and len(r["values"]) == 1 and int(r["values"][0]) >= 0


def test_given_a_bad_value_then_the_field_check_names_it():
    bad = {"disruption": {"consolidateAfter": "10 minutes", "consolidationPolicy": "WhenIdle"}, "extra": 1}
    assert len(spec_problems(bad, NODE_POOL_FIELDS, ())) == 3


def _controller_policy(template: Mapping[str, Any]) -> list[dict[str, Any]]:
    (policy,) = [
        p
        for logical_id, p in resources(template, "AWS::IAM::Policy").items()
        if logical_id.startswith("TrainiumPoolKarpenterControllerRole")
    ]
    return policy["Properties"]["PolicyDocument"]["Statement"]


def _values(value: str | list[str]) -> frozenset[str]:
    return frozenset([value] if isinstance(value, str) else value)


def _emitted_policy(template: Mapping[str, Any]) -> dict[str, Shape]:
    """Sid -> (actions, resources, conditions) of the controller's policy, tokens as placeholders."""
    return _shapes([_detokenize(s) for s in _controller_policy(template)])


def _shapes(statements: list[dict[str, Any]]) -> dict[str, Shape]:
    for statement in statements:
        assert statement["Effect"] == "Allow" and set(statement) <= {
            "Sid",
            "Effect",
            "Action",
            "Resource",
            "Condition",
        }
    policy = {
        s["Sid"]: (
            _values(s["Action"]),
            _values(s["Resource"]),
            {op: {key: _values(v) for key, v in keys.items()} for op, keys in s.get("Condition", {}).items()},
        )
        for s in statements
    }
    assert len(policy) == len(statements), "two statements with one Sid"
    return policy


def _names(template: Mapping[str, Any], region: str) -> dict[str, list[str]]:
    """What each ``${...}`` of the published policy and of its narrowings is in ``template``: the
    cluster, the role the EC2NodeClasses' instance profile holds, the queue the chart reads, and
    every subnet, group, placement group and reservation an EC2NodeClass names."""
    specs = [c["spec"] for c in _objects(template, "EC2NodeClass")]
    (cluster,) = resources(template, "AWS::EKS::Cluster")
    (profile,) = {spec["instanceProfile"].removeprefix("REF_") for spec in specs}
    (role,) = template["Resources"][profile]["Properties"]["Roles"]
    chart = next(c for c in helm_charts(template).values() if c["Chart"] == "karpenter")
    queue = chart["Values"]["settings"]["interruptionQueue"].removeprefix("ATT_").removesuffix("_QueueName")
    return {
        "AWS::Partition": ["REF_AWS::Partition"],
        "AWS::Region": [region],
        "AWS::AccountId": ["REF_AWS::AccountId"],
        "ClusterName": [f"REF_{cluster}"],
        "Cluster.Arn": [f"ATT_{cluster}_Arn"],
        "KarpenterNodeRole.Arn": [f"ATT_{role['Ref']}_Arn"],
        "KarpenterInterruptionQueue.Arn": [f"ATT_{queue}_Arn"],
        "InstanceProfile.Arn": [f"ATT_{profile}_Arn"],
        "Subnet": sorted({t["id"] for s in specs for t in s["subnetSelectorTerms"]}),
        "SecurityGroup": sorted({t["id"] for s in specs for t in s["securityGroupSelectorTerms"]}),
        "PlacementGroup": sorted(
            {s["placementGroupSelector"]["name"] for s in specs if "placementGroupSelector" in s}
        ),
        "CapacityReservation": sorted(
            {t["id"] for s in specs for t in s.get("capacityReservationSelectorTerms", [])}
        ),
    }


_PLACEHOLDER = re.compile(r"\$\{([^}]+)\}")


def _render(text: str, names: Mapping[str, list[str]]) -> list[str]:
    """``text`` with each placeholder replaced, once per combination of its names (none if a
    placeholder names nothing)."""
    keys = list(dict.fromkeys(_PLACEHOLDER.findall(text)))
    rendered = []
    for combination in itertools.product(*(names[key] for key in keys)):
        out = text
        for key, value in zip(keys, combination, strict=True):
            out = out.replace(f"${{{key}}}", value)
        rendered.append(out)
    return rendered


def _expected_policy(names: Mapping[str, list[str]]) -> dict[str, Shape]:
    """The published policy with the omissions and narrowings of tests/contracts/karpenter.py."""
    (old_tag, old_value), (new_tag, new_value) = CLUSTER_TAG_SUBSTITUTE
    expected = {}
    for sid, published in PUBLISHED_POLICY.items():
        if sid in OMITTED_STATEMENTS:
            continue
        kept: set[str] = set()
        for resource in published.resources:
            default = (resource.replace(":*:", ":${AWS::AccountId}:", 1),)
            narrowed, _ = NARROWED_RESOURCES.get((sid, resource), (default, ""))
            kept.update(r for template in narrowed for r in _render(template, names))
        conditions: dict[str, dict[str, frozenset[str]]] = {}
        for op, keys in published.conditions.items():
            for key, values in keys.items():
                values, _ = NARROWED_CONDITIONS.get((sid, op, key), (values, ""))
                prefix, _, tag = key.partition("/")
                if tag == old_tag and values == {old_value}:
                    key, values = f"{prefix}/{new_tag}", frozenset({new_value})
                (rendered_key,) = _render(key, names)
                rendered = frozenset(v for value in values for v in _render(value, names))
                # Two published keys that become one must agree, or the substitution widened one.
                assert conditions.setdefault(op, {}).get(rendered_key, rendered) == rendered, (sid, key)
                conditions[op][rendered_key] = rendered
        expected[sid] = (published.actions, frozenset(kept), conditions)
    return expected


@pytest.mark.parametrize("variant", ["karpenter", "karpenter capacity block"])
def test_given_the_published_policy_then_each_statement_is_it_but_for_the_declared_narrowings(variant):
    # Actions, resources and conditions, statement by statement: a changed resource or condition
    # (PassRole's role or its iam:PassedToService) fails here, not only a changed action.
    template = _platform(variant)
    names = _names(template, config_from_context(VARIANTS[variant]).region)
    assert _emitted_policy(template) == _expected_policy(names)


#: What the direct tests below give controller_statements, and each as a ``${...}`` of the
#: published policy; the subnet, groups and placement group are an EC2NodeClass's (two groups: a
#: dropped one fails).
_LAUNCH = LaunchResources(
    subnet_id="subnet-0a1b",
    security_group_ids=("sg-0cluster", "sg-0efa"),
    placement_group="trn-pg",
    instance_profile_arn="arn:aws:iam::123456789012:instance-profile/trn-nodes",
)
_GIVEN = {
    "cluster_name": "trn-cluster",
    "cluster_arn": "arn:aws:eks:us-west-2:123456789012:cluster/trn-cluster",
    "node_role_arn": "arn:aws:iam::123456789012:role/trn-nodes",
    "queue_arn": "arn:aws:sqs:us-west-2:123456789012:trn-interruptions",
}


@pytest.mark.parametrize("reservation", [None, "cr-0123456789abcdef0"])
def test_given_the_controller_statements_then_each_is_the_published_one_but_for_the_declared_narrowings(
    reservation,
):
    # Given the statements built directly, without a synth (make mutation runs this per mutant;
    # the template test above checks the same after the platform's synth, with the stack's names)
    stack = Stack(App(), "Policy", env=Environment(region="us-west-2"))
    launch = dataclasses.replace(_LAUNCH, capacity_reservation_id=reservation)
    # When each is rendered as the policy document has it
    emitted = [
        _detokenize(stack.resolve(statement.to_statement_json()))
        for statement in controller_statements(stack, launch=launch, **_GIVEN)
    ]
    # Then it is the published statement, narrowed only as declared, for these names
    names = {
        "AWS::Partition": [_detokenize(stack.resolve(stack.partition))],
        "AWS::Region": ["us-west-2"],
        "AWS::AccountId": [_detokenize(stack.resolve(stack.account))],
        "ClusterName": [_GIVEN["cluster_name"]],
        "Cluster.Arn": [_GIVEN["cluster_arn"]],
        "KarpenterNodeRole.Arn": [_GIVEN["node_role_arn"]],
        "KarpenterInterruptionQueue.Arn": [_GIVEN["queue_arn"]],
        "InstanceProfile.Arn": [launch.instance_profile_arn],
        "Subnet": [launch.subnet_id],
        "SecurityGroup": list(launch.security_group_ids),
        "PlacementGroup": [launch.placement_group],
        "CapacityReservation": [reservation] if reservation else [],
    }
    assert _shapes(emitted) == _expected_policy(names)


def test_given_the_declared_narrowings_then_each_names_a_published_statement_and_holds():
    for sid, resource in NARROWED_RESOURCES:
        assert resource in PUBLISHED_POLICY[sid].resources, (sid, resource)
    for sid, op, key in NARROWED_CONDITIONS:
        assert key in PUBLISHED_POLICY[sid].conditions[op], (sid, op, key)
    assert set(OMITTED_STATEMENTS) < set(PUBLISHED_POLICY)
    # spot-instances-request/* is dropped: no NodePool may launch spot capacity.
    for variant in ("karpenter", "karpenter capacity block"):
        for pool in _objects(_platform(variant), "NodePool"):
            requirements = {r["key"]: r for r in pool["spec"]["template"]["spec"]["requirements"]}
            capacity = requirements["karpenter.sh/capacity-type"]
            assert capacity["operator"] == "In" and set(capacity["values"]) <= {"on-demand", "reserved"}
    # ec2.amazonaws.com.cn is dropped: the configuration refuses the China partition.
    assert "aws-cn" not in SUPPORTED_PARTITIONS


def test_given_the_ec2nodeclass_finalizer_then_each_iam_call_it_makes_whatever_the_class_names_is_allowed():
    # Denied, the finalizer never clears: the NodePool manifest's deletion, and cdk destroy, hang.
    template = _platform("karpenter")
    names = _names(template, config_from_context(VARIANTS["karpenter"]).region)
    statements = _emitted_policy(template)
    for action, resource, source in FINALIZER_IAM_CALLS:
        (call,) = _render(resource, names)
        assert any(
            action in actions and not conditions and any(fnmatch.fnmatchcase(call, r) for r in allowed)
            for actions, allowed, conditions in statements.values()
        ), f"{action} on {call} is denied ({source})"


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


def _helm_handler_source() -> str:
    """The Helm handler of the installed aws-cdk-lib (what runs the charts at deploy)."""
    from importlib import resources as package_files

    (archive,) = [f for f in package_files.files("aws_cdk._jsii").iterdir() if f.name.endswith(".jsii.tgz")]
    with tarfile.open(str(archive)) as tar:
        member = tar.extractfile(HELM_HANDLER_MEMBER)
        assert member is not None
        return member.read().decode()


def test_given_skip_crds_then_the_pinned_handler_ignores_it_and_both_charts_carry_the_same_crds():
    source = _helm_handler_source()
    assert "props.get('SkipCrds', False)" in source
    (install,) = re.findall(r"^\s*helm\('upgrade',.*$", source, flags=re.MULTILINE)
    # A handler that passes it would make the CRD chart the only source: then this comment and
    # CHART_CRDS can go.
    assert "skip_crds" not in install, install
    # So the controller chart's crds/ are applied too: harmless only while both charts are the
    # release whose CRDs were compared (CHART_CRDS).
    assert karpenter.CHART.version == karpenter.CRD_CHART.version == CHART_CRDS_VERSION
    template = _platform("karpenter")
    charts = {props["Chart"]: logical_id for logical_id, props in helm_charts(template).items()}
    assert charts["karpenter-crd"] in template["Resources"][charts["karpenter"]]["DependsOn"]


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
    """The training job, as its submitter creates it (the stack applies no Volcano Job itself)."""
    (job,) = submitted_jobs(template)
    return job


def test_given_karpenter_mode_then_training_pods_are_not_disrupted_and_a_stuck_gang_is_aborted():
    job = _volcano_job(synth_training(**VARIANTS["karpenter"]))
    pod = job["spec"]["tasks"][0]["template"]
    key, _ = DO_NOT_DISRUPT
    assert pod["metadata"]["annotations"] == {key: "true"}
    pending = [p for p in job["spec"]["policies"] if p.get("event") == "PodPending"]
    assert pending == [{"event": "PodPending", "action": "AbortJob", "timeout": "30m"}]


def test_given_the_nodegroup_mode_then_the_job_has_neither():
    job = _volcano_job(synth_training(**VARIANTS["nodegroup"]))
    assert "annotations" not in job["spec"]["tasks"][0]["template"]["metadata"]
    assert not [p for p in job["spec"]["policies"] if p.get("event") == "PodPending"]


def test_given_karpenter_mode_then_volcano_creates_pods_without_enqueue_and_keeps_the_charts_plugins():
    def volcano(variant: str) -> dict[str, Any]:
        return next(c for c in helm_charts(_platform(variant)).values() if c["Chart"] == "volcano")["Values"]

    assert "scheduler_config_override" not in volcano("nodegroup")["custom"]
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
    stagings = [
        o
        for _, o in k8s_manifests(template)
        if o["kind"] == "Job"
        and o["metadata"].get("labels", {}).get("app.kubernetes.io/name") == "dataset-staging"
    ]
    assert len(stagings) == 2  # phase 1's shards and phase 2's
    pool = _one(_platform("karpenter"), "NodePool", "dataset")["spec"]["template"]
    for staging in stagings:
        pod = staging["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == pool["metadata"]["labels"]
        assert [t["key"] for t in pod["tolerations"]] == [t["key"] for t in pool["spec"]["taints"]]
    requirements = {r["key"]: r["values"] for r in pool["spec"]["requirements"]}
    assert requirements["node.kubernetes.io/instance-type"][0] not in INSTANCE_FACTS  # not a Trainium type


def _admits(requirement: Mapping[str, Any], value: str) -> bool:
    operator, values = requirement["operator"], requirement["values"]
    if operator == "In":
        return value in values
    bound = int(values[0])
    return {"Lte": int(value) <= bound, "Lt": int(value) < bound, "Gte": int(value) >= bound}[operator]


def test_given_karpenter_mode_then_preparation_runs_on_cpu_nodes_sized_as_karpenter_sizes_them():
    # Given the preparation pool and the facts the synth check sizes a preparation by
    from trainium_eks.versions import PREPARATION_NODES

    pool = _one(_platform("karpenter"), "NodePool", "preparation")["spec"]
    by_key = {r["key"]: r for r in pool["template"]["spec"]["requirements"]}
    # Then the largest node it sizes against is one the pool admits (Karpenter's labels of it),
    # and no larger: its vCPUs are the bound
    for key, value in M7I_12XLARGE_LABELS.items():
        assert _admits(by_key[key], value), key
    assert not _admits(
        by_key["karpenter.k8s.aws/instance-cpu"],
        str(int(M7I_12XLARGE_LABELS["karpenter.k8s.aws/instance-cpu"]) * 2),
    )
    assert PREPARATION_NODES.largest == "m7i.12xlarge"
    assert str(PREPARATION_NODES.largest_vcpus) == M7I_12XLARGE_LABELS["karpenter.k8s.aws/instance-cpu"]
    # and its allocatable is Karpenter's, the limit the table's
    cpu, memory, pods, _, _ = KARPENTER_ALLOCATABLE[PREPARATION_NODES.largest]
    allocatable = PREPARATION_NODES.largest_allocatable
    assert (allocatable.millicpu, allocatable.memory_mib, allocatable.pods) == (cpu, memory, pods)
    assert pool["limits"] == {"cpu": str(PREPARATION_NODES.limit_vcpus)}
    # and it is no Trainium type: requirements on the family, none on the Trainium instance type
    assert by_key["karpenter.k8s.aws/instance-family"]["values"] == ["m7i"]
    assert "node.kubernetes.io/instance-type" not in by_key


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
