"""The allocatable model against the figures its sources publish, and the training pod's share."""

from __future__ import annotations

import pytest

from trainium_job.allocatable import (
    DEFAULT_NODE_DAEMONS,
    NODE_MARGIN,
    Resources,
    cpu_millicores,
    kube_reserved_millicpu,
    memory_mib,
    node_allocatable,
    share_problem,
    training_resources,
)
from trainium_job.errors import ConfigError
from trainium_job.instances import INSTANCE_FACTS, instance_facts
from trainium_job.node_facts import NODE_NETWORK_FACTS


@pytest.mark.parametrize(
    ("quantity", "millicores"), [("250m", 250), ("0.1", 100), ("2", 2000), (4, 4000), ("1.5", 1500), ("0", 0)]
)
def test_given_kubernetes_cpu_quantities_then_millicores(quantity, millicores):
    assert cpu_millicores(quantity) == millicores


@pytest.mark.parametrize(
    ("quantity", "mib"),
    [("40Mi", 40), ("4Gi", 4096), ("512Ki", 1), ("128M", 123), ("1G", 954), (2**20, 1), ("1Ti", 1048576)],
)
def test_given_kubernetes_memory_quantities_then_mib_rounded_up(quantity, mib):
    assert memory_mib(quantity) == mib


@pytest.mark.parametrize("bad", ["10x", "1.5Gb", "m", "-1"])
def test_given_a_malformed_quantity_then_value_error(bad):
    with pytest.raises(ValueError):
        memory_mib(bad)
    with pytest.raises(ValueError):
        cpu_millicores(bad)


@pytest.mark.parametrize(
    ("vcpus", "reserved"),
    # nodeadm getCPUMillicoresToReserve (amazon-eks-ami v20260724 config.go): 6% / 1% / 0.5% /
    # 0.25% ranges; m7i.large 70m, trn1.2xlarge 90m, trn1(n).32xlarge 390m, trn2.48xlarge 550m.
    [(2, 70), (8, 90), (128, 390), (192, 550)],
)
def test_given_nodeadm_cpu_ranges_then_kube_reserved_cpu_matches_its_formula(vcpus, reserved):
    assert kube_reserved_millicpu(vcpus * 1000) == reserved


@pytest.mark.parametrize(
    ("instance_type", "max_pods", "reserved_mib"),
    # nodeadm: ENIs x (IPs - 1) + 2 from instance-info.jsonl, kube-reserved 11 x pods + 255 MiB.
    # trn1.2xlarge's 58 is also what a recorded EKS AL2023 node reports (Capacity pods: 58).
    [
        ("trn1.2xlarge", 58, 893),
        ("trn1.32xlarge", 247, 2972),
        ("trn1n.32xlarge", 247, 2972),
        ("trn2.48xlarge", 100, 1355),
    ],
)
def test_given_nodeadm_instance_info_then_max_pods_and_kube_reserved_memory(
    instance_type, max_pods, reserved_mib
):
    node = node_allocatable(instance_facts(instance_type))
    assert node.max_pods == max_pods
    assert node.kube_reserved.memory_mib == reserved_mib
    assert node.eviction_mib == 100


def test_given_trn1_32xlarge_without_huge_pages_then_the_model_is_karpenters_published_figure():
    # aws/karpenter-provider-aws issue #6509: Karpenter's trn1.32xlarge allocatable is 481894Mi
    # (7.5% VM overhead, nodeadm's kube-reserved and eviction). The reporter's real node had
    # ~22 GiB more: the model is conservative.
    node = node_allocatable(instance_facts("trn1.32xlarge"))
    assert node.mem_total_mib - node.kube_reserved.memory_mib - node.eviction_mib == 481894


def test_given_trn1_2xlarge_then_modeled_memtotal_is_below_a_recorded_node_capacity():
    # A recorded trn1.2xlarge on EKS AL2023 (2026) reports Capacity memory 32332152Ki.
    recorded_mib = 32332152 // 1024
    assert node_allocatable(instance_facts("trn1.2xlarge")).mem_total_mib <= recorded_mib


def test_given_any_instance_type_then_allocatable_takes_the_efa_huge_pages_out_of_memory():
    for facts in INSTANCE_FACTS.values():
        node = node_allocatable(facts)
        assert node.huge_pages_mib == 5128 * 2  # EKS EFA guide: 5128 2 MiB pages
        assert node.allocatable.memory_mib == (
            node.mem_total_mib - 10256 - node.kube_reserved.memory_mib - node.eviction_mib
        )
        assert node.allocatable.millicpu == facts.vcpus * 1000 - node.kube_reserved.millicpu


def test_given_the_facts_table_then_every_instance_type_has_node_network_facts():
    assert set(NODE_NETWORK_FACTS) == set(INSTANCE_FACTS)


def test_given_default_reserve_then_training_pod_gets_the_rest_less_the_margin_and_it_all_fits():
    for facts in INSTANCE_FACTS.values():
        allocatable = node_allocatable(facts).allocatable
        pod = training_resources(facts)
        assert pod + DEFAULT_NODE_DAEMONS + NODE_MARGIN == Resources(
            allocatable.millicpu, allocatable.memory_mib, DEFAULT_NODE_DAEMONS.pods + 1
        )
        assert (pod + DEFAULT_NODE_DAEMONS).fits_in(allocatable)


def test_given_a_reserve_over_half_the_node_then_one_line_config_error():
    facts = instance_facts("trn1.32xlarge")
    assert share_problem(facts, Resources(60_000, 1024)) is None
    with pytest.raises(ConfigError) as err:
        training_resources(facts, Resources(70_000, 1024))
    assert err.value.field_name == "node_reserved"
    assert "less than 50%" in str(err.value) and "\n" not in str(err.value)


def test_given_a_reserve_that_takes_every_pod_slot_then_refused():
    facts = instance_facts("trn2.48xlarge")  # 100 pods
    assert share_problem(facts, Resources(pods=100)) is not None
