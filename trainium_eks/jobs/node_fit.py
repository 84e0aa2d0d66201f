"""How one Trainium node is shared: the kubelet's allocatable, the platform's DaemonSets, the
dataset pods that run beside the training pod, and the training pod, for a configuration.

The training pod takes what is left (:func:`trainium_job.allocatable.training_resources`). The
training job is submitted once its first phase's shards are there
(:mod:`trainium_eks.jobs.job_submission`), so the first phase's staging or preparation pods are
gone before its pods come. What remains beside them is phase 2's staging pod
(``training_phases=both``), created at deploy and waiting for phase 1's shards, then staging
during phase 1, and each phase's held-out staging pod (``heldout_enabled``), after its phase's
shards: on a Trainium node with ``trainium_capacity=nodegroup`` (on one node, which cannot be
known: room for one such pod reserved on every node; a second waits for it), on a CPU node of its
own with Karpenter. It must fit next to the training pod, or it waits through phase 1 and phase 2
never finds its shards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from trainium_job.allocatable import (
    NODE_MARGIN,
    NodeAllocatable,
    Resources,
    node_allocatable,
    share_problem,
    training_resources,
)
from trainium_job.errors import ConfigError
from trainium_job.instances import InstanceFacts

from ..addons.node_daemons import DaemonSettings, NodeDaemon, total
from ..addons.registry import configured_node_daemons
from .dataset_staging import STAGING_RESOURCES


@dataclass(frozen=True)
class NodeFit:
    """One Trainium node of a configuration, shared out.

    Attributes:
        facts: the instance type's facts row.
        node: its allocatable and the derivation.
        daemons: the DaemonSets on it.
        dataset: (what, requests) of the dataset pods that share it with the training pod.
    """

    facts: InstanceFacts
    node: NodeAllocatable
    daemons: tuple[NodeDaemon, ...]
    dataset: tuple[tuple[str, Resources], ...]

    @property
    def daemon_requests(self) -> Resources:
        return total(self.daemons)

    @property
    def reserved(self) -> Resources:
        """What the training pod leaves to others: DaemonSets and dataset pods."""
        out = self.daemon_requests
        for _, requests in self.dataset:
            out = out + requests
        return out

    @property
    def training(self) -> Resources:
        """The training pod's requests (ConfigError when too little is left, see
        :func:`check_node_fit`)."""
        return training_resources(self.facts, self.reserved)

    def review_lines(self, *, training: bool) -> list[str]:
        """Lines for the synth review."""
        node = self.node
        lines = [
            f"  node fit:     per {node.instance_type}: allocatable {node.allocatable.describe()}, "
            f"{node.max_pods} pods",
            f"                (MemTotal modeled {node.mem_total_mib:,} MiB - huge pages {node.huge_pages_mib:,} - "
            f"kube-reserved {node.kube_reserved.memory_mib:,} - eviction {node.eviction_mib}; "
            f"kube-reserved CPU {node.kube_reserved.millicpu}m)",
            f"                daemons {self.daemon_requests.describe()} ({len(self.daemons)} DaemonSets)"
            + "".join(f"; {what} {requests.describe()}" for what, requests in self.dataset),
        ]
        if training:
            lines.append(
                f"                training pod {self.training.describe()} (margin {NODE_MARGIN.describe()})"
            )
        return lines


class FitSettings(DaemonSettings, Protocol):
    """The settings that decide how a Trainium node is shared (what
    :class:`~trainium_eks.config.PlatformSettings` has)."""

    @property
    def instance_type(self) -> str: ...
    @property
    def desired_nodes(self) -> int: ...
    @property
    def training_phases(self) -> str: ...
    @property
    def trainium_capacity(self) -> str: ...
    @property
    def heldout_enabled(self) -> bool: ...


def dataset_pods(c: FitSettings) -> tuple[tuple[str, Resources], ...]:
    """The dataset pods that share a node with the training pod, with their requests: on the
    Trainium nodegroup, one staging pod's room (phase 2's, or a held-out set's: they ask the same;
    module docstring)."""
    both, heldout = c.training_phases == "both", c.heldout_enabled
    if not c.training_enabled or c.trainium_capacity == "karpenter" or not (both or heldout):
        return ()
    name = " or ".join(
        n for n, on in (("phase 2's staging pod", both), ("a held-out staging pod", heldout)) if on
    )
    return ((name, Resources.of_requests(STAGING_RESOURCES["requests"], pods=1)),)


def node_fit(c: FitSettings) -> NodeFit:
    """The sharing of one Trainium node under configuration ``c``."""
    facts = c.facts
    daemons = configured_node_daemons(c)
    return NodeFit(facts=facts, node=node_allocatable(facts), daemons=daemons, dataset=dataset_pods(c))


def check_node_fit(c: FitSettings) -> None:
    """ConfigError (naming ``instance_type``) when the training pod would get too little of a
    node beside the DaemonSets and phase 2's staging pod; the preparation pods, which run before
    it, have their own check (:func:`~trainium_eks.jobs.dataset_preparation.validate_preparation_config`)."""
    if not c.training_enabled:
        return
    problem = share_problem(c.facts, node_fit(c).reserved)
    if problem:
        raise ConfigError("instance_type", c.instance_type, f"{problem}: use a larger instance type")
