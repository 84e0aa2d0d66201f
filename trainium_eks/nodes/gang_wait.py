"""The gang wait with ``trainium_capacity=karpenter``: how long a job's pods may stay Pending before
Volcano aborts the job (:func:`trainium_job.pod.gang_wait_policy`), and the least wait in which a
healthy new node can take its pod.

What the wait covers. Volcano starts a pod's ``PodPending`` timer when the pod is created and
cancels it on the pod's next phase change: a pod added is a ``PodPendingEvent``, a pod whose phase
becomes Running a ``PodRunningEvent``, and any pod event but ``PodPendingEvent`` cancels that pod's
pending action (volcano-sh/volcano v1.15.0 pkg/controllers/job/job_controller_handler.go L185
``addPod``, L287-293 ``updatePod``; pkg/controllers/job/job_controller.go L358 and L411-452
``CleanPodDelayActionsIfNeed``). A pod is Pending until it is bound to a node and its containers
have started, "as well as time spent pulling images onto the host" (k8s.io/api core/v1 types.go,
``PodPending``). So each pod of the gang waits, in that phase, for:

1. its node's launch and join, device plugins ready (:data:`NODE_LAUNCH_MINUTES`);
2. the node's deep health check (``trainium_health_check``), which keeps the node tainted until it
   passes; the check's pod runs the training image, so it pulls it first
   (:data:`HEALTH_CHECK_BASE_MINUTES`, :data:`HEALTH_CHECK_ROUND_MINUTES`);
3. the image pull (:func:`trainium_eks.images.image_build.pull_minutes`): by the check's pod when the check
   is on, else by the training pod; the training pod then finds the image on the node.

Volcano binds the gang at once, when every node can take its pod, and Karpenter launches the
gang's nodes together (docs/capacity.md), so the wait is one node's sum, not the nodes' total.
Not in it: the driver check and the fabric check before training (:data:`trainium_eks.images.image_build.
CHECKS_MINUTES`) run in the training container, after the pod is Running; so do the dataset wait,
the precompile and training.

It covers a healthy node, not a check that hangs: such a node gets its verdict only at the deep
check's bound (its tools' timeouts at their longest), after the job has been aborted; the job is
resumed (``vcctl job resume``) once the node is replaced.

Nor is the wait shorter than Karpenter's registration limit: a node that has not registered within 15
minutes is deleted (:data:`MIN_GANG_WAIT_MINUTES`), and a wait under that
would abort a job whose node Karpenter still counts as coming.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from trainium_job.errors import ConfigError
from trainium_job.instances import InstanceFacts
from trainium_job.node_health import COMPUTE_PARALLEL

from ..images.image_build import pull_minutes

__all__ = [
    "MIN_GANG_WAIT_MINUTES",
    "HEALTH_CHECK_BASE_MINUTES",
    "HEALTH_CHECK_ROUND_MINUTES",
    "NODE_LAUNCH_MINUTES",
    "GangWaitFloor",
    "check_gang_wait",
    "gang_wait_floor",
    "health_check_minutes",
]

#: The shortest gang wait accepted, however short a new node's phases: Karpenter gives a node 15
#: minutes to register before it deletes it (kubernetes-sigs/karpenter v1.14.1
#: pkg/controllers/nodeclaim/lifecycle/liveness.go ``registrationTimeout``).
MIN_GANG_WAIT_MINUTES: Final = 15
#: Minutes from a Trainium node's launch to its joining with its device plugins ready: an
#: estimate (no published figure for trn1 was found): EC2 start and boot of the AL2023 Neuron AMI,
#: nodeadm's join, the Neuron and EFA plugins. Bounded by Karpenter's 15-minute registration
#: limit (:data:`MIN_GANG_WAIT_MINUTES`).
NODE_LAUNCH_MINUTES: Final = 5
#: The deep check's parts that do not grow with the NeuronCores: ``neuron-ls``, the EFA ports in
#: sysfs and one ``nccom-test`` all-reduce of 32 MiB (milliseconds on the Neuron docs' runs), with
#: the pod's start. An estimate: not measured on hardware.
HEALTH_CHECK_BASE_MINUTES: Final = 1
#: One round of the compute check: :data:`trainium_job.node_health.COMPUTE_PARALLEL` processes at
#: once, each loading torch-xla and the Neuron runtime and compiling an 8x8 product with
#: neuronx-cc. An estimate: not measured on hardware.
HEALTH_CHECK_ROUND_MINUTES: Final = 1


def health_check_minutes(facts: InstanceFacts) -> int:
    """The deep check's estimated minutes on a healthy node of ``facts``: the fixed parts and one
    round per :data:`COMPUTE_PARALLEL` NeuronCores."""
    return HEALTH_CHECK_BASE_MINUTES + HEALTH_CHECK_ROUND_MINUTES * math.ceil(
        facts.neuron_cores / COMPUTE_PARALLEL
    )


@dataclass(frozen=True)
class GangWaitFloor:
    """The least gang wait: the phases a pod waits through on a new node (label, minutes), and
    Karpenter's registration limit under which no wait may go."""

    parts: tuple[tuple[str, float], ...]
    registration_minutes: int = MIN_GANG_WAIT_MINUTES

    @property
    def phases_minutes(self) -> float:
        return sum(minutes for _, minutes in self.parts)

    @property
    def minutes(self) -> int:
        """Whole minutes (Volcano's timeout is written in minutes): the phases' sum rounded up, and
        not under the registration limit."""
        return max(self.registration_minutes, math.ceil(self.phases_minutes))

    def explain(self) -> str:
        """The sum in words, e.g. ``~5 min node launch and join + ~8 min image pull + ...``."""
        terms = " + ".join(f"~{minutes:.0f} min {label}" for label, minutes in self.parts)
        text = f"{terms} = ~{self.phases_minutes:.0f} min"
        if self.minutes > math.ceil(self.phases_minutes):
            text += f", under Karpenter's {self.registration_minutes}-minute registration limit"
        return text


def gang_wait_floor(facts: InstanceFacts, *, health_check: bool) -> GangWaitFloor:
    """The phases a gang's pod is Pending through on a node Karpenter launches for it."""
    parts: list[tuple[str, float]] = [("node launch and join", NODE_LAUNCH_MINUTES)]
    if health_check:
        rounds = math.ceil(facts.neuron_cores / COMPUTE_PARALLEL)
        parts.append(("image pull (by the health check's pod)", pull_minutes()))
        parts.append(
            (
                f"health check ({rounds} round{'s' if rounds != 1 else ''} of {COMPUTE_PARALLEL} NeuronCores)",
                health_check_minutes(facts),
            )
        )
    else:
        parts.append(("image pull", pull_minutes()))
    return GangWaitFloor(tuple(parts))


def check_gang_wait(
    minutes: int, facts: InstanceFacts, *, health_check: bool, field: str = "trainium_gang_wait_minutes"
) -> None:
    """ConfigError when ``minutes`` is under :func:`gang_wait_floor`: every job whose nodes are
    launched for it would be aborted before its new nodes could take its pods."""
    floor = gang_wait_floor(facts, health_check=health_check)
    if minutes < floor.minutes:
        raise ConfigError(
            field,
            minutes,
            f"give at least {floor.minutes}; a pod of the gang stays Pending on a new {facts.name} "
            f"through {floor.explain()} (trainium_eks/nodes/gang_wait.py): a shorter wait aborts every job "
            "before its new nodes can take its pods",
        )
