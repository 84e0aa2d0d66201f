"""The Karpenter node pool: its objects from the configuration, and one clear error per bad input.
What Karpenter reads of them is checked against its sources in tests/contracts/test_karpenter.py."""

from __future__ import annotations

import pytest

from trainium_eks.addons.volcano import scheduler_config
from trainium_eks.config import ConfigError, config_from_context
from trainium_eks.node_pool import MIN_GANG_WAIT_MINUTES, ami_alias, efa_only_interfaces, node_pool
from trainium_job.instances import instance_facts
from trainium_job.pod import gang_wait_policy


def test_given_an_ami_release_then_the_alias_is_its_build_date():
    assert ami_alias("1.35.6-20260625") == "al2023@v20260625"
    with pytest.raises(ConfigError, match="trainium_ami_release_version"):
        ami_alias("v20260625")


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("trainium_capacity", "spot", "one of"),
        ("trainium_gang_wait_minutes", str(MIN_GANG_WAIT_MINUTES - 1), str(MIN_GANG_WAIT_MINUTES)),
        ("trainium_idle_minutes", "-1", "trainium_idle_minutes"),
    ],
)
def test_given_a_bad_capacity_setting_when_loaded_then_one_error_names_it(key, value, says):
    with pytest.raises(ConfigError) as err:
        config_from_context({"trainium_capacity": "karpenter", key: value})
    assert key in str(err.value) and says in str(err.value)


def test_given_the_nodegroup_mode_then_no_gang_wait_is_set():
    assert config_from_context({}).gang_wait_minutes is None
    assert config_from_context({"trainium_capacity": "karpenter"}).gang_wait_minutes == 30


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


def test_given_nodes_on_demand_then_volcano_runs_without_enqueue_and_otherwise_as_the_chart():
    default, on_demand = scheduler_config(nodes_on_demand=False), scheduler_config(nodes_on_demand=True)
    assert default.splitlines()[0] == 'actions: "enqueue, allocate, backfill"'
    assert on_demand.splitlines()[1:] == default.splitlines()[1:]


def test_given_a_gang_wait_then_the_policy_aborts_the_job_after_it():
    assert gang_wait_policy(45) == {"event": "PodPending", "action": "AbortJob", "timeout": "45m"}
