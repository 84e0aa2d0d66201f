"""The synth review's cost lines: the idle cost per hour from the price table, the Trainium cost
with Karpenter, and the expected time to the first training step."""

from __future__ import annotations

import pytest

from tests.support import k8s_manifests, resources
from tests.trainium_eks.nodes.test_gang_wait import TRN1_32XL_HEALTH_CHECK_MINUTES
from trainium_eks.addons.etcd import DEFAULT_VOLUME_GIB as ETCD_VOLUME_GIB
from trainium_eks.cluster.eks_cluster import SYSTEM_ROOT_VOLUME_GIB
from trainium_eks.config import config_from_context
from trainium_eks.images import image_build
from trainium_eks.report import prices
from trainium_eks.report.review import (
    EKS_CLUSTER_CREATE_MINUTES,
    NODE_LAUNCH_MINUTES,
    idle_parts,
    idle_total,
    platform_review,
)
from trainium_eks.storage.fsx import PERSISTENT_2_THROUGHPUT_TIERS
from trainium_eks.versions import DATASET_NODE_INSTANCE_TYPE, PREPARATION_NODES, SYSTEM_NODE_INSTANCE_TYPE
from trainium_job import estimates

KARPENTER = {"trainium_capacity": "karpenter"}
NODEGROUP = {"trainium_capacity": "nodegroup"}


def _gb_hour(price: prices.Price, gib: float) -> float:
    """The table's monthly price of ``gib`` as an hourly one, written out."""
    return gib * price.usd / 730


def _shared_idle(*, ebs_gib: float) -> float:
    """Default configuration's idle cost without the Trainium nodes, from the table's rows."""
    return (
        prices.EKS_CONTROL_PLANE.usd
        + 2 * prices.EC2_ON_DEMAND["m7i.large"].usd
        + prices.NAT_GATEWAY.usd
        + prices.PUBLIC_IPV4.usd
        + _gb_hour(prices.FSX_PERSISTENT_2[125], 1200)
        + _gb_hour(prices.EBS_GP3, ebs_gib)
    )


def _lines(context: dict[str, str], prefix: str) -> list[str]:
    """The review's line starting with ``prefix`` and its continuation lines."""
    lines = platform_review(config_from_context(context)).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(prefix))
    block = [lines[start]]
    for line in lines[start + 1 :]:
        if not line.startswith(" " * 16):
            break
        block.append(line)
    return block


# --- the price table ----------------------------------------------------------------------------


def test_given_the_table_then_every_row_names_its_page_and_monthly_rows_use_730_hours():
    rows = [
        prices.EKS_CONTROL_PLANE,
        prices.NAT_GATEWAY,
        prices.NAT_DATA_PROCESSED,
        prices.PUBLIC_IPV4,
        *prices.EC2_ON_DEMAND.values(),
        *prices.FSX_PERSISTENT_2.values(),
        prices.FSX_SCRATCH_2,
        prices.EBS_GP3,
    ]
    assert all(row.page.startswith("Amazon ") and row.page.endswith(" pricing") for row in rows)
    assert prices.EBS_GP3.hourly(730) == pytest.approx(prices.EBS_GP3.usd)
    assert prices.NAT_GATEWAY.hourly(3) == pytest.approx(3 * 0.045)
    with pytest.raises(ValueError):
        prices.NAT_DATA_PROCESSED.hourly()  # per GB moved: no hourly rate
    assert prices.PRICE_BASIS == "list price, us-east-1, checked 2026-11"


def test_given_the_platform_choices_then_the_table_prices_each_of_them():
    assert SYSTEM_NODE_INSTANCE_TYPE in prices.EC2_ON_DEMAND
    assert DATASET_NODE_INSTANCE_TYPE in prices.EC2_ON_DEMAND
    # m7i is priced per vCPU: the largest preparation node at the small one's rate
    largest = prices.EC2_ON_DEMAND[PREPARATION_NODES.largest].usd
    assert largest == pytest.approx(
        prices.EC2_ON_DEMAND["m7i.large"].usd * PREPARATION_NODES.largest_vcpus / 2
    )
    assert tuple(prices.FSX_PERSISTENT_2) == PERSISTENT_2_THROUGHPUT_TIERS
    assert prices.fsx_storage("SCRATCH_2", None) is prices.FSX_SCRATCH_2
    with pytest.raises(KeyError):
        prices.fsx_storage("PERSISTENT_2", 200)


def test_given_the_volumes_the_idle_cost_counts_then_they_are_the_sizes_the_platform_creates(platform_json):
    (system,) = [
        t["Properties"]["LaunchTemplateData"]
        for k, t in resources(platform_json, "AWS::EC2::LaunchTemplate").items()
        if k.startswith("ClusterSystem")
    ]
    assert [m["Ebs"]["VolumeSize"] for m in system["BlockDeviceMappings"]] == [SYSTEM_ROOT_VOLUME_GIB]
    (etcd,) = [
        o
        for _, o in k8s_manifests(platform_json)
        if o["kind"] == "StatefulSet" and "etcd" in o["metadata"]["name"]
    ]
    (claim,) = etcd["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"] == f"{ETCD_VOLUME_GIB}Gi"


# --- idle: no job running ---------------------------------------------------------------------


def test_given_karpenter_when_reviewed_then_idle_is_the_platform_without_trainium_nodes_from_the_table():
    parts = idle_parts(config_from_context(KARPENTER))
    ebs_gib = 50 + ETCD_VOLUME_GIB + 2 * SYSTEM_ROOT_VOLUME_GIB  # Prometheus, etcd, system roots
    expected = _shared_idle(ebs_gib=ebs_gib)
    assert idle_total(parts) == pytest.approx(expected)
    head, priced, basis, left_out = _lines(KARPENTER, "  idle:")
    assert (
        head.startswith(f"  idle:         ${expected:,.2f}/h with no job running")
        and "no Trainium node" in head
    )
    for part in (
        "EKS control plane $0.10",
        "2 x m7i.large system nodes $0.20",
        "1 NAT gateway + its IPv4 $0.05",
        "FSx PERSISTENT_2 1,200 GiB at 125 MB/s/TiB $0.24",
        f"EBS gp3 {ebs_gib} GiB (Prometheus 50, etcd 2, system roots 2 x 50) $0.02",
    ):
        assert part in priced
    assert "trn1" not in priced
    assert "list price, us-east-1, checked 2026-11, 730 h a month" in basis
    assert "NAT data $0.045/GB" in left_out


def test_given_karpenter_when_reviewed_then_the_trainium_cost_is_only_while_a_job_runs():
    (cost,) = _lines({**KARPENTER, "trainium_idle_minutes": "20"}, "  cost:")
    assert cost.startswith("  cost:         $43.00/h on demand ($21.50/h per node, us-east-1 list price)")
    assert "only while a job runs" in cost and "20 min after the last job ends" in cost
    assert f"~${43.00 * 20 / 60:,.2f} of empty nodes" in cost


def test_given_karpenter_with_a_capacity_block_when_reviewed_then_the_cost_says_the_block_is_paid_anyway():
    context = {
        **KARPENTER,
        "capacity_reservation_id": "cr-0123456789abcdef0",
        "capacity_type": "capacity-block",
    }
    (cost,) = _lines(context, "  cost:")
    assert "a Capacity Block is paid up front for its whole term" in cost


def _always_on_nodes() -> float:
    """The default nodes' price per hour with their root volumes, from the tables."""
    config = config_from_context({})
    assert config.facts.on_demand_usd_per_hour is not None
    return 2 * config.facts.on_demand_usd_per_hour + _gb_hour(prices.EBS_GP3, 2 * config.root_volume_gib)


def test_given_the_nodegroup_when_reviewed_then_idle_adds_the_always_on_nodes_and_compares():
    without_nodes = _shared_idle(ebs_gib=50 + ETCD_VOLUME_GIB + 2 * SYSTEM_ROOT_VOLUME_GIB)
    nodes = _always_on_nodes()
    assert idle_total(idle_parts(config_from_context(NODEGROUP))) == pytest.approx(without_nodes + nodes)
    head, priced, _, _ = _lines(NODEGROUP, "  idle:")
    assert head.startswith(f"  idle:         ${without_nodes + nodes:,.2f}/h with no job running")
    assert f"Trainium nodes always on (trainium_capacity=karpenter: ${without_nodes:,.2f}/h)" in head
    assert priced.lstrip().startswith("2 x trn1.32xlarge $43.00 + EKS control plane $0.10")
    assert "Trainium roots 2 x 512" in priced
    # A nodegroup's cost line is the price alone: its nodes bill from deploy to destroy.
    assert _lines(NODEGROUP, "  cost:") == [
        "  cost:         $43.00/h on demand ($21.50/h per node, us-east-1 list price)"
    ]


def test_given_the_default_when_reviewed_then_idle_has_no_trainium_node_and_names_the_nodegroup_s_cost():
    # Issue 34 item 13: the default is on-demand capacity; the fixed nodegroup is one key away.
    assert config_from_context({}).trainium_capacity == "karpenter"
    without_nodes = _shared_idle(ebs_gib=50 + ETCD_VOLUME_GIB + 2 * SYSTEM_ROOT_VOLUME_GIB)
    head, priced, _, _ = _lines({}, "  idle:")
    assert head.startswith(f"  idle:         ${without_nodes:,.2f}/h with no job running")
    fixed = without_nodes + _always_on_nodes()
    assert head.endswith(
        f", no Trainium node (trainium_capacity=nodegroup keeps 2 x trn1.32xlarge on: ${fixed:,.2f}/h)"
    )
    assert "trn1" not in priced and "Trainium roots" not in priced


@pytest.mark.parametrize(
    ("context", "part", "usd_per_hour"),
    [
        ({"fsx_deployment_type": "SCRATCH_2"}, "FSx SCRATCH_2 1,200 GiB", 1200 * 0.140 / 730),
        (
            {"fsx_throughput_per_tib": "500", "fsx_storage_gib": "2400"},
            "FSx PERSISTENT_2 2,400 GiB at 500 MB/s/TiB",
            2400 * 0.340 / 730,
        ),
        ({"nat_gateways": "2"}, "2 NAT gateways + their IPv4", 2 * (0.045 + 0.005)),
        ({"system_nodes": "3"}, "3 x m7i.large system nodes", 3 * 0.1008),
        (
            {"monitoring_enabled": "false", "etcd_enabled": "false", "training_rdzv_backend": "c10d"},
            "EBS gp3 100 GiB (system roots 2 x 50)",
            100 * 0.08 / 730,
        ),
    ],
)
def test_given_a_platform_setting_when_reviewed_then_its_idle_part_follows_it(context, part, usd_per_hour):
    parts = {p.label: p.usd_per_hour for p in idle_parts(config_from_context({**KARPENTER, **context}))}
    assert parts[part] == pytest.approx(usd_per_hour)


def test_given_an_existing_vpc_when_reviewed_then_no_nat_is_counted_and_the_line_says_so():
    context = {
        **KARPENTER,
        "existing_vpc_id": "vpc-0123456789abcdef0",
        "existing_private_subnet_ids": '["subnet-0123456789abcdef0", "subnet-0123456789abcdef1"]',
    }
    assert not any("NAT" in p.label for p in idle_parts(config_from_context(context)))
    assert "the existing VPC's NAT" in _lines(context, "  idle:")[-1]


# --- start: the time to the first step ------------------------------------------------------------


@pytest.mark.parametrize(
    ("context", "begins", "minutes"),
    [
        (
            NODEGROUP,
            "deploy -> first step",
            EKS_CLUSTER_CREATE_MINUTES
            + image_build.BUILD_MINUTES_ESTIMATE
            + NODE_LAUNCH_MINUTES
            + image_build.pull_minutes()
            + TRN1_32XL_HEALTH_CHECK_MINUTES
            + estimates.CHECKS_MINUTES
            + estimates.PRECOMPILE_MINUTES,
        ),
        (
            KARPENTER,
            "job submitted -> first step",
            NODE_LAUNCH_MINUTES
            + image_build.pull_minutes()
            + TRN1_32XL_HEALTH_CHECK_MINUTES
            + estimates.CHECKS_MINUTES
            + estimates.PRECOMPILE_MINUTES,
        ),
        (
            {**KARPENTER, "trainium_health_check": "false"},
            "job submitted -> first step",
            NODE_LAUNCH_MINUTES
            + image_build.pull_minutes()
            + estimates.CHECKS_MINUTES
            + estimates.PRECOMPILE_MINUTES,
        ),
    ],
)
def test_given_either_capacity_mode_when_reviewed_then_one_start_line_sums_the_phases_with_sources(
    context, begins, minutes
):
    review = platform_review(config_from_context(context))
    assert sum(line.startswith("  start:") for line in review.splitlines()) == 1
    start = _lines(context, "  start:")
    assert start[0].startswith(f"  start:        {begins} ~{minutes:.0f} min: ")
    assert f"~{NODE_LAUNCH_MINUTES} min node launch and join" in start[0]
    assert f"~{image_build.pull_minutes():.0f} min image pull" in start[0]
    assert f"~{estimates.PRECOMPILE_MINUTES} min precompile into an empty cache set" in start[0]
    assert "aws/containers-roadmap#1227" in start[-1] and "Neuron BERT pretraining tutorial" in start[-1]
    # The deep check holds a new node until it passes (with it on): its estimate is a phase too.
    checked = context.get("trainium_health_check") != "false"
    assert (f"~{TRN1_32XL_HEALTH_CHECK_MINUTES:.0f} min node health check" in start[0]) is checked
    assert ("node health check: estimate" in start[-1]) is checked


def test_given_karpenter_when_reviewed_then_the_start_line_says_what_the_first_job_and_a_quick_relaunch_wait():
    start = _lines({**KARPENTER, "trainium_idle_minutes": "20"}, "  start:")
    warm = (
        NODE_LAUNCH_MINUTES
        + image_build.pull_minutes()
        + TRN1_32XL_HEALTH_CHECK_MINUTES
        + estimates.CHECKS_MINUTES
    )
    assert f"~{warm:.0f} min once the cache on FSx holds the graphs" in start[0]
    assert (
        f"the first job also waits for the deploy (~{EKS_CLUSTER_CREATE_MINUTES} min EKS cluster" in start[1]
    )
    assert "one within 20 min of the last reuses its nodes" in start[1]


def test_given_a_type_without_a_list_price_when_reviewed_then_the_nodegroup_s_idle_cost_is_not_a_figure():
    context = {"instance_type": "trn2.48xlarge"}
    assert config_from_context(context).facts.on_demand_usd_per_hour is None
    head = _lines(context, "  idle:")[0]
    assert head.endswith(
        "(trainium_capacity=nodegroup keeps 2 x trn2.48xlarge on: more (no list price for its nodes))"
    )
