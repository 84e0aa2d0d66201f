"""Trn vCPU quota, instance offerings by AZ ID, and a configured reservation or Capacity Block."""

from __future__ import annotations

import pytest

from tests.trainium_eks.doctor.stubs import (
    RESERVATION,
    Call,
    aws_with,
    config,
    offerings_call,
    quota,
    quota_call,
    reservation,
    reservations_call,
    target,
)
from trainium_eks.doctor import capacity
from trainium_eks.doctor.findings import Status
from trainium_eks.versions import DATASET_NODE_INSTANCE_TYPE, PREPARATION_NODES, SYSTEM_NODE_INSTANCE_TYPE
from trainium_job.instances import instance_facts

TRN = ("ec2", "L-2C3B7624", "Running On-Demand Trn instances")
VCPUS = instance_facts("trn1.32xlarge").vcpus


def test_given_a_quota_for_the_nodes_when_checked_then_ok_with_the_need_from_the_facts_table():
    aws = aws_with([quota_call(*TRN, 2 * VCPUS)])
    verdict = capacity.trn_quota(target(aws))
    aws.assert_all_asked()
    assert verdict.status is Status.OK
    assert f"is {2 * VCPUS} vCPUs; 2 x trn1.32xlarge need {2 * VCPUS}" in verdict.found


def test_given_a_zero_trn_quota_when_checked_then_fail_with_the_increase_command():
    verdict = capacity.trn_quota(target(aws_with([quota_call(*TRN, 0)])))
    assert verdict.status is Status.FAIL
    assert "--service-code ec2 --quota-code L-2C3B7624 --desired-value 256 --region us-west-2" in verdict.fix


def test_given_room_for_desired_but_not_max_nodes_when_checked_then_warn():
    cfg = config(max_nodes="4")
    verdict = capacity.trn_quota(target(aws_with([quota_call(*TRN, 2 * VCPUS)]), cfg))
    assert verdict.status is Status.WARN
    assert f"max_nodes=4 needs {4 * VCPUS}" in verdict.found


def test_given_a_capacity_block_when_the_quota_is_short_then_warn_not_fail():
    cfg = config(capacity_reservation_id=RESERVATION, capacity_type="capacity-block")
    assert capacity.trn_quota(target(aws_with([quota_call(*TRN, 0)]), cfg)).status is Status.WARN


def test_given_a_never_adjusted_quota_when_checked_then_the_aws_default_is_read():
    aws = aws_with(
        [
            Call("service-quotas", "GetServiceQuota", error=("NoSuchResourceException", 400)),
            Call(
                "service-quotas",
                "GetAWSDefaultServiceQuota",
                quota(*TRN, 0),
                {"ServiceCode": "ec2", "QuotaCode": "L-2C3B7624"},
            ),
        ]
    )
    verdict = capacity.trn_quota(target(aws))
    aws.assert_all_asked()
    assert verdict.status is Status.FAIL
    assert "AWS default" in verdict.found


def test_given_the_code_names_another_quota_when_checked_then_the_line_says_so():
    verdict = capacity.trn_quota(target(aws_with([quota_call("ec2", "L-2C3B7624", "Something else", 512)])))
    assert "expected 'Running On-Demand Trn instances'" in verdict.found


def test_given_the_type_offered_in_the_az_id_when_checked_then_ok():
    aws = aws_with([offerings_call("trn1.32xlarge", ["usw2-az4"], ["usw2-az4"])])
    assert capacity.instance_offering(target(aws)).status is Status.OK
    aws.assert_all_asked()


def test_given_the_type_not_offered_in_the_az_id_when_checked_then_fail_naming_the_az_ids_that_offer_it():
    aws = aws_with(
        [
            offerings_call("trn1.32xlarge", [], ["usw2-az4"]),
            offerings_call("trn1.32xlarge", ["usw2-az3", "usw2-az1"], None),
        ]
    )
    verdict = capacity.instance_offering(target(aws))
    assert verdict.status is Status.FAIL
    assert verdict.fix == "set trainium_az_id to one of usw2-az1, usw2-az3"


def test_given_no_az_of_the_region_offers_the_type_when_checked_then_the_fix_is_another_region():
    aws = aws_with(
        [offerings_call("trn1.32xlarge", [], ["usw2-az4"]), offerings_call("trn1.32xlarge", [], None)]
    )
    assert "choose another region" in capacity.instance_offering(target(aws)).fix


def test_given_the_system_type_missing_in_the_second_az_when_checked_then_fail():
    aws = aws_with([offerings_call(SYSTEM_NODE_INSTANCE_TYPE, ["usw2-az4"], ["usw2-az4", "usw2-az3"])])
    verdict = capacity.system_offering(target(aws))
    assert verdict.status is Status.FAIL
    assert "not offered in usw2-az3" in verdict.found


def test_given_karpenter_when_the_staging_type_is_missing_in_the_trainium_az_then_fail():
    aws = aws_with([offerings_call(DATASET_NODE_INSTANCE_TYPE, [], ["usw2-az4"])])
    verdict = capacity.dataset_offering(target(aws, config(trainium_capacity="karpenter")))
    assert verdict.status is Status.FAIL
    assert f"{DATASET_NODE_INSTANCE_TYPE} (staging node) is not offered in usw2-az4" == verdict.found


def test_given_karpenter_and_preparation_then_the_largest_preparation_type_is_checked_too():
    cfg = config(trainium_capacity="karpenter", preparation_enabled="true", training_phases="1")
    staging = offerings_call(DATASET_NODE_INSTANCE_TYPE, ["usw2-az4"], ["usw2-az4"])
    aws = aws_with([staging, offerings_call(PREPARATION_NODES.largest, ["usw2-az4"], ["usw2-az4"])])
    verdict = capacity.dataset_offering(target(aws, cfg))
    aws.assert_all_asked()
    assert verdict.status is Status.OK
    assert (
        verdict.found
        == "m7i.xlarge (staging node) and m7i.12xlarge (largest preparation node) are offered in usw2-az4"
    )
    # Missing, it fails naming the table to change: the preparation's size is checked against it
    aws = aws_with([staging, offerings_call(PREPARATION_NODES.largest, [], ["usw2-az4"])])
    verdict = capacity.dataset_offering(target(aws, cfg))
    assert verdict.status is Status.FAIL
    assert verdict.found == "m7i.12xlarge (largest preparation node) is not offered in usw2-az4"
    assert "PREPARATION_NODES" in verdict.fix


def test_given_the_nodegroup_mode_then_the_staging_type_is_not_asked_about():
    aws = aws_with([])
    assert capacity.dataset_offering(target(aws, config(trainium_capacity="nodegroup"))).status is Status.OK
    assert aws.asked == []


def test_given_no_reservation_configured_when_checked_then_ok_without_any_call():
    aws = aws_with([])
    verdict = capacity.capacity_reservation(target(aws))
    assert verdict.status is Status.OK
    assert aws.asked == []


RESERVED = {"capacity_reservation_id": RESERVATION}


def test_given_an_active_matching_reservation_when_checked_then_ok_with_its_end():
    aws = aws_with([reservations_call(reservation())])
    verdict = capacity.capacity_reservation(target(aws, config(**RESERVED)))
    assert verdict.status is Status.OK
    assert "until 2026-11-27 11:30 UTC: 2 of 2 x trn1.32xlarge free, 2 needed" in verdict.found


@pytest.mark.parametrize(
    ("changes", "context", "fix"),
    [
        ({"InstanceType": "trn1n.32xlarge"}, {}, "set instance_type=trn1n.32xlarge"),
        ({"AvailabilityZoneId": "usw2-az3"}, {}, "set trainium_az_id=usw2-az3"),
        ({"ReservationType": "capacity-block"}, {}, "set capacity_type=capacity-block"),
        ({}, {"capacity_type": "capacity-block"}, "set capacity_type=on-demand"),
        ({"State": "expired"}, {}, "use an active reservation or Capacity Block"),
        ({"AvailableInstanceCount": 1}, {}, "set desired_nodes/min_nodes to 1 or less"),
    ],
)
def test_given_a_reservation_that_does_not_fit_when_checked_then_fail_with_the_fix(changes, context, fix):
    aws = aws_with([reservations_call(reservation(**changes))])
    verdict = capacity.capacity_reservation(target(aws, config(**RESERVED, **context)))
    assert verdict.status is Status.FAIL
    assert fix in verdict.fix


def test_given_a_capacity_block_not_started_yet_when_checked_then_warn_with_its_start():
    row = reservation(ReservationType="capacity-block", State="scheduled", AvailableInstanceCount=0)
    cfg = config(**RESERVED, capacity_type="capacity-block")
    verdict = capacity.capacity_reservation(target(aws_with([reservations_call(row)]), cfg))
    assert verdict.status is Status.WARN
    assert "starts 2026-11-20 11:30 UTC" in verdict.found


def test_given_an_unknown_reservation_id_when_checked_then_fail_not_a_traceback():
    aws = aws_with(
        [
            Call(
                "ec2",
                "DescribeCapacityReservations",
                params={"CapacityReservationIds": [RESERVATION]},
                error=("InvalidCapacityReservationId.NotFound", 400),
            )
        ]
    )
    verdict = capacity.capacity_reservation(target(aws, config(**RESERVED)))
    assert verdict.status is Status.FAIL
    assert "does not exist in us-west-2" in verdict.found


BLOCK = {**RESERVED, "capacity_type": "capacity-block"}


@pytest.mark.parametrize("state", ["active", "scheduled"])
def test_given_karpenter_and_a_capacity_block_when_checked_then_the_verdict_gives_karpenter_s_drain_time(
    state,
):
    # The block ends 2026-11-27 11:30 UTC; Karpenter drains 40 minutes earlier.
    row = reservation(ReservationType="capacity-block", State=state)
    cfg = config(**BLOCK, trainium_capacity="karpenter")
    verdict = capacity.capacity_reservation(target(aws_with([reservations_call(row)]), cfg))
    assert verdict.status is (Status.OK if state == "active" else Status.WARN)
    assert "Karpenter drains its nodes 40 min before the block ends, at 2026-11-27 10:50 UTC" in verdict.found
    assert capacity.KARPENTER_BLOCK_DRAIN.total_seconds() == 40 * 60


@pytest.mark.parametrize(
    "context",
    [
        {**BLOCK, "trainium_capacity": "nodegroup"},  # a nodegroup: no Karpenter drain
        {**RESERVED, "trainium_capacity": "karpenter"},  # an On-Demand reservation: no drain
    ],
)
def test_given_no_karpenter_capacity_block_when_checked_then_the_verdict_is_unchanged(context):
    kind = "capacity-block" if context.get("capacity_type") == "capacity-block" else "default"
    aws = aws_with([reservations_call(reservation(ReservationType=kind))])
    verdict = capacity.capacity_reservation(target(aws, config(**context)))
    assert verdict.status is Status.OK
    assert verdict.found.endswith("until 2026-11-27 11:30 UTC: 2 of 2 x trn1.32xlarge free, 2 needed")
