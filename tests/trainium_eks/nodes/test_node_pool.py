"""The Karpenter node pool: its objects from the configuration, and one clear error per bad input.
What Karpenter reads of them is checked against its sources in tests/contracts/test_karpenter.py."""

from __future__ import annotations

import math

import pytest

from trainium_eks.addons.volcano import scheduler_config
from trainium_eks.config import config_from_context
from trainium_eks.nodes.gang_wait import MIN_GANG_WAIT_MINUTES, gang_wait_floor
from trainium_eks.nodes.node_pool import (
    ami_alias,
    check_karpenter_bounds,
    dataset_node_pool,
    efa_only_interfaces,
    karpenter_warnings,
    node_pool,
    nodes_in_subnet,
    preparation_node_pool,
)
from trainium_job.errors import ConfigError
from trainium_job.instances import instance_facts
from trainium_job.pod import gang_wait_policy
from trainium_job.scheduling import DATASET_TAINT


def test_given_an_ami_release_then_the_alias_is_its_build_date():
    assert ami_alias("1.35.6-20260625") == "al2023@v20260625"
    with pytest.raises(ConfigError, match="trainium_ami_release_version"):
        ami_alias("v20260625")


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("trainium_capacity", "spot", "one of"),
        (
            "trainium_gang_wait_minutes",
            str(MIN_GANG_WAIT_MINUTES - 1),
            "give at least",
        ),  # test_review_gang_wait.py
        ("trainium_idle_minutes", "-1", "trainium_idle_minutes"),
    ],
)
def test_given_a_bad_capacity_setting_when_loaded_then_one_error_names_it(key, value, says):
    with pytest.raises(ConfigError) as err:
        config_from_context({"trainium_capacity": "karpenter", key: value})
    assert key in str(err.value) and says in str(err.value)


def test_given_the_nodegroup_mode_then_no_gang_wait_is_set():
    assert config_from_context({"trainium_capacity": "nodegroup"}).gang_wait_minutes is None
    assert config_from_context({}).gang_wait_minutes == 30  # the default is Karpenter


def test_given_efa_only_then_an_ena_primary_and_one_efa_only_interface_per_card():
    interfaces = efa_only_interfaces(instance_facts("trn1n.32xlarge"))
    assert interfaces[0] == {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"}
    efa_only = [i for i in interfaces if i["interfaceType"] == "efa-only"]
    assert sorted(i["networkCardIndex"] for i in efa_only) == list(range(16))


def test_given_a_pool_then_it_is_bounded_by_max_nodes_and_releases_empty_nodes_after_the_idle_minutes():
    facts = instance_facts("trn1.32xlarge")
    pool = node_pool(facts=facts, az_id="usw2-az4", max_nodes=3, idle_minutes=7, reserved=True)
    spec = pool["spec"]
    assert spec["limits"] == {"cpu": str(3 * facts.vcpus)}
    assert spec["disruption"]["consolidateAfter"] == "7m"
    requirement = {r["key"]: r["values"] for r in spec["template"]["spec"]["requirements"]}
    assert requirement["karpenter.sh/capacity-type"] == ["reserved"]


def test_given_the_preparation_pool_then_m7i_up_to_48_vcpus_at_most_192_at_once_tainted_like_staging():
    # Given the preparation pool beside the staging node's
    preparation, staging = preparation_node_pool(az_id="usw2-az4"), dataset_node_pool(az_id="usw2-az4")
    spec = preparation["spec"]
    requirements = [(r["key"], r["operator"], r["values"]) for r in spec["template"]["spec"]["requirements"]]
    # Then a range of one family, not a Trainium type, on demand in the Trainium AZ, bounded in vCPUs
    assert requirements == [
        ("karpenter.k8s.aws/instance-family", "In", ["m7i"]),
        ("karpenter.k8s.aws/instance-cpu", "Lte", ["48"]),
        ("topology.k8s.aws/zone-id", "In", ["usw2-az4"]),
        ("karpenter.sh/capacity-type", "In", ["on-demand"]),
    ]
    assert spec["limits"] == {"cpu": "192"}
    assert (
        spec["template"]["spec"]["taints"] == staging["spec"]["template"]["spec"]["taints"] == [DATASET_TAINT]
    )
    assert spec["template"]["metadata"]["labels"] == {"trainium-eks/pool": "preparation"}
    assert (
        spec["template"]["spec"]["nodeClassRef"]["name"] == preparation["metadata"]["name"] == "preparation"
    )
    assert spec["disruption"] == staging["spec"]["disruption"]  # empty nodes go after a minute


def test_given_nodes_on_demand_then_volcano_runs_without_enqueue_and_otherwise_as_the_chart():
    default, on_demand = scheduler_config(nodes_on_demand=False), scheduler_config(nodes_on_demand=True)
    assert default.splitlines()[0] == 'actions: "enqueue, allocate, backfill"'
    assert on_demand.splitlines()[1:] == default.splitlines()[1:]


def test_given_a_gang_wait_then_the_policy_aborts_the_job_after_it():
    assert gang_wait_policy(45) == {"event": "PodPending", "action": "AbortJob", "timeout": "45m"}


# --- bounds of the karpenter keys (docs/capacity.md, "Bounds") ---------------------------------


def test_given_no_idle_time_with_karpenter_then_it_is_refused_with_the_reason():
    with pytest.raises(ConfigError) as err:
        config_from_context({"trainium_capacity": "karpenter", "trainium_idle_minutes": "0"})
    message = str(err.value)
    assert "trainium_idle_minutes" in message and "give at least 1" in message and "restart" in message
    assert config_from_context({"trainium_capacity": "karpenter", "trainium_idle_minutes": "1"})
    # The nodegroup does not read the key.
    nodegroup = {"trainium_capacity": "nodegroup", "trainium_idle_minutes": "0"}
    assert config_from_context(nodegroup).trainium_idle_minutes == 0


# The created VPC's Trainium subnet is a /18 (trainium_eks/network/vpc.py SUBNET_LAYOUT): 16,384
# addresses less the 5 AWS keeps (EC2 API Reference, CreateSubnet) = 16,379. A trn1.32xlarge's
# VPC CNI may fill 5 ENIs x 50 IPv4 addresses (awslabs/amazon-eks-ami v20260724 nodeadm
# instance-info.jsonl, trainium_job/node_facts.py), and with the efa layout each of its 7 other
# network cards' interfaces has an address: 257 -> 63 nodes; efa-only interfaces have none:
# 250 -> 65 nodes.
@pytest.mark.parametrize(("layout", "most"), [("efa", 63), ("efa-only", 65)])
def test_given_more_nodes_than_the_trainium_subnet_has_addresses_for_then_max_nodes_is_refused(layout, most):
    base = {"trainium_capacity": "karpenter", "efa_interface_layout": layout}
    assert config_from_context({**base, "max_nodes": str(most)}).max_nodes == most
    with pytest.raises(ConfigError) as err:
        config_from_context({**base, "max_nodes": str(most + 1)})
    message = str(err.value)
    assert "max_nodes" in message and f"give at most {most}" in message and "existing_vpc_id" in message
    with pytest.raises(ConfigError, match="give at most"):
        config_from_context({**base, "max_nodes": "100000"})


def test_given_the_construct_check_then_it_names_the_construct_props():
    facts = instance_facts("trn1.32xlarge")
    with pytest.raises(ConfigError, match="idle_minutes"):
        check_karpenter_bounds(
            max_nodes=2, idle_minutes=0, facts=facts, efa_layout="efa", subnet_prefix_length=18
        )
    # trn1.2xlarge: 4 ENIs x 15 addresses, no EFA: 16,379 // 60 (16,384 // 60 would be 273).
    assert nodes_in_subnet(instance_facts("trn1.2xlarge"), "efa", 18) == 272
    # An imported subnet's size is not known at synth: no address bound then.
    check_karpenter_bounds(
        max_nodes=10_000, idle_minutes=1, facts=facts, efa_layout="efa", subnet_prefix_length=None
    )


def test_given_more_nodes_than_the_job_with_the_health_check_then_the_review_warns_of_the_extra_launches():
    facts = instance_facts("trn1.32xlarge")
    args = {"desired_nodes": 2, "idle_minutes": 10, "facts": facts}
    assert karpenter_warnings(max_nodes=2, health_check=True, **args) == []
    (warning,) = karpenter_warnings(max_nodes=4, health_check=True, **args)
    assert "max_nodes=4" in warning and "set max_nodes=2" in warning and "16 Neuron devices" in warning
    assert karpenter_warnings(max_nodes=4, health_check=False, **args) == []


def test_given_an_idle_time_longer_than_a_relaunch_then_the_review_warns_of_its_cost():
    facts = instance_facts("trn1.32xlarge")
    relaunch = gang_wait_floor(facts, health_check=True).phases_minutes
    args = {"max_nodes": 2, "desired_nodes": 2, "facts": facts, "health_check": True}
    assert karpenter_warnings(idle_minutes=math.floor(relaunch), **args) == []
    (warning,) = karpenter_warnings(idle_minutes=math.floor(relaunch) + 1, **args)
    assert "trainium_idle_minutes" in warning and "relaunch" in warning
