"""The gang wait with Karpenter: the least wait a new node needs before its pod runs, derived from
the review's own figures, shown in the review, and a shorter configured wait refused."""

from __future__ import annotations

import math

import pytest

from tests.trainium_eks.jobs.training_support import job_stack
from trainium_eks.config import config_from_context
from trainium_eks.images import image_build
from trainium_eks.nodes.gang_wait import (
    HEALTH_CHECK_BASE_MINUTES,
    HEALTH_CHECK_ROUND_MINUTES,
    MIN_GANG_WAIT_MINUTES,
    NODE_LAUNCH_MINUTES,
    gang_wait_floor,
)
from trainium_eks.report.review import platform_review
from trainium_job.errors import ConfigError
from trainium_job.fabric_check_steps import MODULE as FABRIC_CHECK_MODULE
from trainium_job.instances import instance_facts
from trainium_job.node_health import COMPUTE_PARALLEL
from trainium_job.pod import GANG_WAIT_EVENT
from trainium_job.pod_program import loads

KARPENTER = {"trainium_capacity": "karpenter"}
#: The figures written out: the image lines' 20 GB at 2.5 GB/min, the compute check's rounds of
#: ``COMPUTE_PARALLEL`` NeuronCores (32 on a trn1.32xlarge: 4 rounds), the node's launch and join.
PULL_MINUTES = image_build.TRAINING_IMAGE_GB / image_build.PULL_GB_PER_MINUTE
TRN1_32XL_HEALTH_CHECK_MINUTES = (
    HEALTH_CHECK_BASE_MINUTES + HEALTH_CHECK_ROUND_MINUTES * 32 / COMPUTE_PARALLEL
)
DEFAULT_FLOOR = math.ceil(NODE_LAUNCH_MINUTES + PULL_MINUTES + TRN1_32XL_HEALTH_CHECK_MINUTES)


def test_given_the_defaults_then_the_floor_is_launch_plus_pull_plus_health_check_and_30_covers_it():
    floor = gang_wait_floor(instance_facts("trn1.32xlarge"), health_check=True)
    assert (PULL_MINUTES, TRN1_32XL_HEALTH_CHECK_MINUTES, DEFAULT_FLOOR) == (8, 5, 18)
    assert floor.minutes == DEFAULT_FLOOR
    assert config_from_context(KARPENTER).trainium_gang_wait_minutes == 30 >= DEFAULT_FLOOR


def test_given_karpenter_when_reviewed_then_the_review_shows_the_wait_against_its_sum():
    lines = platform_review(config_from_context(KARPENTER)).splitlines()
    nodes = next(i for i, line in enumerate(lines) if line.startswith("  nodes:"))
    assert lines[nodes + 1] == (
        f"                gang wait 30 min, at least {DEFAULT_FLOOR}: a pod waits for its new node through "
        f"~{NODE_LAUNCH_MINUTES} min node launch and join + ~{PULL_MINUTES:.0f} min image pull (by the health "
        f"check's pod) + ~{TRN1_32XL_HEALTH_CHECK_MINUTES:.0f} min health check (4 rounds of 8 NeuronCores) = "
        f"~{DEFAULT_FLOOR} min; the fabric check runs after it starts (trainium_eks/nodes/gang_wait.py)"
    )


def test_given_a_fixed_nodegroup_when_reviewed_then_no_gang_wait_line():
    assert "gang wait" not in platform_review(config_from_context({"trainium_capacity": "nodegroup"}))


@pytest.mark.parametrize(
    ("context", "floor", "says"),
    [
        (KARPENTER, DEFAULT_FLOOR, "health check (4 rounds of 8 NeuronCores)"),
        # Without the check the phases sum to 13 min: Karpenter's 15-minute registration limit is
        # the floor (a node it still waits for must not abort the job).
        (
            {**KARPENTER, "trainium_health_check": "false"},
            MIN_GANG_WAIT_MINUTES,
            f"under Karpenter's {MIN_GANG_WAIT_MINUTES}-minute registration limit",
        ),
    ],
)
def test_given_a_wait_under_the_floor_when_loaded_then_the_error_names_key_value_floor_and_why(
    context, floor, says
):
    with pytest.raises(ConfigError) as err:
        config_from_context({**context, "trainium_gang_wait_minutes": str(floor - 1)})
    assert err.value.field_name == "trainium_gang_wait_minutes" and err.value.value == floor - 1
    assert err.value.fix.startswith(
        f"give at least {floor}; a pod of the gang stays Pending on a new trn1.32xlarge"
    )
    assert says in err.value.fix and "aborts every job" in err.value.fix
    assert (
        config_from_context({**context, "trainium_gang_wait_minutes": str(floor)}).gang_wait_minutes == floor
    )


def test_given_more_neuron_cores_then_the_health_check_and_the_floor_grow_by_rounds():
    # trn2.48xlarge: 64 NeuronCores at LNC=2, 8 rounds; trn1.2xlarge: 2, one round.
    big = gang_wait_floor(instance_facts("trn2.48xlarge"), health_check=True)
    small = gang_wait_floor(instance_facts("trn1.2xlarge"), health_check=True)
    assert big.minutes == math.ceil(NODE_LAUNCH_MINUTES + PULL_MINUTES + HEALTH_CHECK_BASE_MINUTES + 8)
    assert small.minutes == max(
        MIN_GANG_WAIT_MINUTES, math.ceil(NODE_LAUNCH_MINUTES + PULL_MINUTES + HEALTH_CHECK_BASE_MINUTES + 1)
    )


def test_given_the_job_then_the_fabric_check_runs_in_the_training_container_after_the_wait():
    # Volcano cancels a pod's PodPending action on its next phase change (volcano-sh/volcano
    # v1.15.0 pkg/controllers/job/job_controller_handler.go L287-293: a pod turning Running is a
    # PodRunningEvent; job_controller.go L411-452 CleanPodDelayActionsIfNeed cancels the pending
    # action on any pod event but PodPending), and a pod is Running once its containers have
    # started (k8s.io/api core/v1 types.go PodPending, PodRunning). The fabric check is in the
    # training container's program, not an init container that would keep the pod Pending, so the
    # floor leaves it out.
    job = job_stack(gang_wait_minutes=30).job
    pod = job["spec"]["tasks"][0]["template"]["spec"]
    assert "initContainers" not in pod
    described = loads(pod["containers"][0]["command"][-1])
    assert described.fabric_check is not None and FABRIC_CHECK_MODULE in described.fabric_check.measure
    assert {"event": GANG_WAIT_EVENT, "action": "AbortJob", "timeout": "30m"} in job["spec"]["policies"]
