"""Can the account launch the Trainium nodes: the vCPU quota, the type in the AZ, a reservation."""

from __future__ import annotations

import datetime as dt
from typing import Any

from botocore.exceptions import ClientError

from ..nodes.node_pool import CAPACITY_BLOCK_DRAIN_MINUTES
from ..versions import DATASET_NODE_INSTANCE_TYPE, PREPARATION_NODES, SYSTEM_NODE_INSTANCE_TYPE
from .aws import error_code
from .findings import Status, Verdict
from .quotas import TRN_VCPUS, quota_value, renamed
from .target import Target


def trn_quota(t: Target) -> Verdict:
    """The Trn vCPU quota against nodes x vCPUs of the instance type (instance facts)."""
    c, facts = t.config, t.config.facts
    need, need_max = c.desired_nodes * facts.vcpus, c.max_nodes * facts.vcpus
    quota = quota_value(t.aws, TRN_VCPUS)
    found = (
        f"{quota.describe(TRN_VCPUS)} vCPUs; {c.desired_nodes} x {facts.name} need {need}"
        f"{renamed(TRN_VCPUS, quota)}"
    )
    ask = f"ask for {need_max:g}: {TRN_VCPUS.increase_command(c.region, need_max)}"
    if quota.value < need:
        # Whether instances in a Capacity Block draw on this quota is not verified here.
        status = Status.WARN if c.capacity_type == "capacity-block" else Status.FAIL
        return Verdict(status, found + " (Trn instances already running count too)", ask)
    if quota.value < need_max:
        return Verdict(Status.WARN, f"{found}, but max_nodes={c.max_nodes} needs {need_max}", ask)
    return Verdict(Status.OK, found)


def _offered_in(t: Target, instance_type: str, az_ids: list[str] | None) -> set[str]:
    """AZ IDs of the region (of ``az_ids``, if given) that offer ``instance_type``."""
    filters = [{"Name": "instance-type", "Values": [instance_type]}]
    if az_ids is not None:
        filters.append({"Name": "location", "Values": az_ids})
    pages = (
        t.aws.client("ec2")
        .get_paginator("describe_instance_type_offerings")
        .paginate(LocationType="availability-zone-id", Filters=filters)
    )
    return {
        offer["Location"]
        for page in pages
        for offer in page["InstanceTypeOfferings"]
        if offer["InstanceType"] == instance_type
    }


def instance_offering(t: Target) -> Verdict:
    """The Trainium type offered in the Trainium AZ ID (and where it is, when it is not)."""
    c = t.config
    if c.trainium_az_id in _offered_in(t, c.instance_type, [c.trainium_az_id]):
        return Verdict(Status.OK, f"{c.instance_type} is offered in {c.trainium_az_id}")
    elsewhere = sorted(_offered_in(t, c.instance_type, None))
    fix = (
        f"set trainium_az_id to one of {', '.join(elsewhere)}"
        if elsewhere
        else f"no AZ of {c.region} offers it: choose another region"
    )
    return Verdict(Status.FAIL, f"{c.instance_type} is not offered in {c.trainium_az_id} ({c.region})", fix)


def system_offering(t: Target) -> Verdict:
    """The system nodegroup's type offered in both AZ IDs (the control plane needs two)."""
    c = t.config
    wanted = [c.trainium_az_id, c.second_az_id]
    offered = _offered_in(t, SYSTEM_NODE_INSTANCE_TYPE, wanted)
    missing = [az for az in wanted if az not in offered]
    if missing:
        return Verdict(
            Status.FAIL,
            f"{SYSTEM_NODE_INSTANCE_TYPE} (system nodes) is not offered in {', '.join(missing)}",
            "choose AZ IDs that offer it (aws ec2 describe-instance-type-offerings --location-type "
            "availability-zone-id)",
        )
    return Verdict(Status.OK, f"{SYSTEM_NODE_INSTANCE_TYPE} (system nodes) is offered in {', '.join(wanted)}")


def dataset_offering(t: Target) -> Verdict:
    """With Karpenter: the staging node's type offered in the Trainium AZ ID (beside FSx), and with
    ``preparation_enabled`` the largest preparation node's type, which the preparation's size is
    checked against at synth."""
    c = t.config
    if c.trainium_capacity != "karpenter":
        return Verdict(Status.OK, "not used: dataset staging and preparation run on the Trainium nodegroup")
    wanted = {DATASET_NODE_INSTANCE_TYPE: ("staging node", "DATASET_NODE_INSTANCE_TYPE")}
    if c.preparation_enabled:
        wanted[PREPARATION_NODES.largest] = ("largest preparation node", "PREPARATION_NODES")
    found = []
    for instance_type, (what, where) in wanted.items():
        if c.trainium_az_id not in _offered_in(t, instance_type, [c.trainium_az_id]):
            return Verdict(
                Status.FAIL,
                f"{instance_type} ({what}) is not offered in {c.trainium_az_id}",
                f"change {where} in trainium_eks/versions.py to a type offered there",
            )
        found.append(f"{instance_type} ({what})")
    verb = "are" if len(found) > 1 else "is"
    return Verdict(Status.OK, f"{' and '.join(found)} {verb} offered in {c.trainium_az_id}")


#: ``capacity_type`` -> the reservation's ``ReservationType`` (EC2 API CapacityReservation).
RESERVATION_TYPES = {"on-demand": "default", "capacity-block": "capacity-block"}


#: How long before a Capacity Block's ``EndDate`` Karpenter drains the nodes it launched into it:
#: it marks the block expiring then and disrupts its nodes (aws/karpenter-provider-aws v1.14.1
#: pkg/apis/v1/ec2nodeclass_status.go L238, ``capacityReservationExpirationPeriod = time.Minute * 40``;
#: docs tasks/odcrs.md L88-99). A managed nodegroup has no such step.
KARPENTER_BLOCK_DRAIN = dt.timedelta(minutes=CAPACITY_BLOCK_DRAIN_MINUTES)


def karpenter_drain(t: Target, r: dict[str, Any]) -> str:
    """With Karpenter and a Capacity Block: when Karpenter drains the block's nodes (else "")."""
    c = t.config
    if c.trainium_capacity != "karpenter" or c.capacity_type != "capacity-block" or not r.get("EndDate"):
        return ""
    drain = r["EndDate"] - KARPENTER_BLOCK_DRAIN
    minutes = KARPENTER_BLOCK_DRAIN.total_seconds() / 60
    return (
        f"; Karpenter drains its nodes {minutes:.0f} min before the block ends, at {drain:%Y-%m-%d %H:%M} UTC "
        "(a job still running then is sent SIGTERM and checkpoints)"
    )


def capacity_reservation(t: Target) -> Verdict:
    """A configured reservation or Capacity Block: exists, is active, type, AZ and size match."""
    c = t.config
    if c.capacity_reservation_id is None:
        return Verdict(
            Status.OK,
            f"none configured: on-demand launches need free {c.instance_type} capacity in "
            f"{c.trainium_az_id} (InsufficientInstanceCapacity otherwise; a Capacity Block reserves it)",
        )
    rid = c.capacity_reservation_id
    try:
        answer = t.aws.client("ec2").describe_capacity_reservations(CapacityReservationIds=[rid])
    except ClientError as err:
        if error_code(err).startswith("InvalidCapacityReservationId"):
            return Verdict(
                Status.FAIL,
                f"{rid} does not exist in {c.region} ({error_code(err)})",
                "check capacity_reservation_id and region",
            )
        raise
    found = answer["CapacityReservations"]
    if not found:
        return Verdict(
            Status.FAIL, f"{rid} not found in {c.region}", "check capacity_reservation_id and region"
        )
    return _judge_reservation(t, found[0])


def _judge_reservation(t: Target, r: dict[str, Any]) -> Verdict:
    c, rid = t.config, t.config.capacity_reservation_id
    kind = r.get("ReservationType", "default")
    if kind != RESERVATION_TYPES[c.capacity_type]:
        other = next(k for k, v in RESERVATION_TYPES.items() if v == kind)
        return Verdict(Status.FAIL, f"{rid} is a '{kind}' reservation", f"set capacity_type={other}")
    if r["InstanceType"] != c.instance_type:
        return Verdict(
            Status.FAIL,
            f"{rid} holds {r['InstanceType']}, not {c.instance_type}",
            f"set instance_type={r['InstanceType']} or use a reservation of {c.instance_type}",
        )
    if r.get("AvailabilityZoneId") != c.trainium_az_id:
        return Verdict(
            Status.FAIL,
            f"{rid} is in {r.get('AvailabilityZoneId')}, not {c.trainium_az_id}",
            f"set trainium_az_id={r.get('AvailabilityZoneId')}",
        )
    state = r["State"]
    until = f" until {r['EndDate']:%Y-%m-%d %H:%M} UTC" if r.get("EndDate") else ""
    if state == "scheduled":
        if r["TotalInstanceCount"] < c.desired_nodes:
            return _too_small(rid, r["TotalInstanceCount"], c.desired_nodes)
        return Verdict(
            Status.WARN,
            f"{rid} ({r['TotalInstanceCount']} x {c.instance_type}) starts {r['StartDate']:%Y-%m-%d %H:%M} UTC"
            f"{karpenter_drain(t, r)}",
            "deploy after it starts: nodes cannot launch into it before",
        )
    if state != "active":
        return Verdict(Status.FAIL, f"{rid} is {state}", "use an active reservation or Capacity Block")
    if r["AvailableInstanceCount"] < c.desired_nodes:
        return _too_small(rid, r["AvailableInstanceCount"], c.desired_nodes)
    return Verdict(
        Status.OK,
        f"{rid} is active in {c.trainium_az_id}{until}: {r['AvailableInstanceCount']} of "
        f"{r['TotalInstanceCount']} x {c.instance_type} free, {c.desired_nodes} needed{karpenter_drain(t, r)}",
    )


def _too_small(rid: str | None, free: int, need: int) -> Verdict:
    return Verdict(
        Status.FAIL,
        f"{rid} has {free} instances free, {need} needed",
        f"set desired_nodes/min_nodes to {free} or less, or free or extend the reservation",
    )
