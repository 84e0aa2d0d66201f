"""What a Trainium node offers pods, and what the training pod may take of it.

:func:`node_allocatable` applies the kubelet's rules to the node facts
(:mod:`trainium_job.node_facts`): allocatable = MemTotal - pre-allocated huge pages -
kube-reserved - eviction threshold for memory, vCPUs - kube-reserved for CPU, and nodeadm's
pod count. :func:`training_resources` subtracts what others keep on the node (its DaemonSets,
a dataset pod) and :data:`NODE_MARGIN`; the platform computes the DaemonSets from the charts and
manifests it deploys (``trainium_eks.node_daemons``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from .errors import ConfigError
from .instances import InstanceFacts
from .node_facts import (
    EFA_HUGE_PAGES,
    EVICTION_HARD_MEMORY_MIB,
    HUGE_PAGE_MIB,
    KUBE_RESERVED_CPU_RANGES,
    KUBE_RESERVED_MIB_BASE,
    KUBE_RESERVED_MIB_PER_POD,
    VM_MEMORY_OVERHEAD_FRACTION,
    network_facts,
)

_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([a-zA-Z]*)$")
#: Kubernetes quantity suffixes (apimachinery ``resource.Quantity``) in bytes.
_MEMORY_SUFFIXES: Final = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}


@dataclass(frozen=True)
class Resources:
    """CPU (millicores), memory (MiB) and pods: a pod's requests, or what a node offers."""

    millicpu: int = 0
    memory_mib: int = 0
    pods: int = 0

    def __add__(self, other: Resources) -> Resources:
        return Resources(
            self.millicpu + other.millicpu, self.memory_mib + other.memory_mib, self.pods + other.pods
        )

    def __sub__(self, other: Resources) -> Resources:
        return Resources(
            self.millicpu - other.millicpu, self.memory_mib - other.memory_mib, self.pods - other.pods
        )

    def times(self, count: int) -> Resources:
        return Resources(self.millicpu * count, self.memory_mib * count, self.pods * count)

    def fits_in(self, capacity: Resources) -> bool:
        """Whether these requests fit in ``capacity`` (each dimension on its own)."""
        return (
            self.millicpu <= capacity.millicpu
            and self.memory_mib <= capacity.memory_mib
            and self.pods <= capacity.pods
        )

    def requests(self) -> dict[str, str]:
        """``{"cpu": "<m>m", "memory": "<MiB>Mi"}`` for a container's resources."""
        return {"cpu": f"{self.millicpu}m", "memory": f"{self.memory_mib}Mi"}

    def describe(self) -> str:
        """``127.61 vCPU / 471,638 MiB``."""
        return f"{self.millicpu / 1000:,.2f} vCPU / {self.memory_mib:,} MiB"

    @classmethod
    def of_requests(cls, requests: Mapping[str, object], *, pods: int = 0) -> Resources:
        """A container's ``resources.requests`` (``cpu``, ``memory``; others ignored)."""
        return cls(
            millicpu=cpu_millicores(requests.get("cpu", 0)),
            memory_mib=memory_mib(requests.get("memory", 0)),
            pods=pods,
        )


def cpu_millicores(quantity: object) -> int:
    """A Kubernetes CPU quantity (``"250m"``, ``"0.1"``, ``2``) in millicores, rounded up."""
    text = str(quantity).strip()
    match = _QUANTITY.match(text)
    if match is None or match.group(2) not in ("", "m"):
        raise ValueError(f"not a CPU quantity: {quantity!r}")
    value = float(match.group(1))
    return math.ceil(value if match.group(2) == "m" else value * 1000)


def memory_mib(quantity: object) -> int:
    """A Kubernetes memory quantity (``"40Mi"``, ``"4Gi"``, ``"128M"``, bytes) in MiB, rounded up."""
    text = str(quantity).strip()
    match = _QUANTITY.match(text)
    if match is None or match.group(2) not in _MEMORY_SUFFIXES:
        raise ValueError(f"not a memory quantity: {quantity!r}")
    return math.ceil(float(match.group(1)) * _MEMORY_SUFFIXES[match.group(2)] / 2**20)


@dataclass(frozen=True)
class NodeAllocatable:
    """One node type's allocatable resources and how they were derived (all memory in MiB)."""

    instance_type: str
    vcpus: int
    nominal_memory_mib: int
    #: Modeled MemTotal: the nominal memory less Karpenter's VM overhead estimate.
    mem_total_mib: int
    huge_pages_mib: int
    kube_reserved: Resources
    eviction_mib: int
    max_pods: int

    @property
    def allocatable(self) -> Resources:
        """What the kubelet reports allocatable (and the scheduler fits pods into)."""
        return Resources(
            millicpu=self.vcpus * 1000 - self.kube_reserved.millicpu,
            memory_mib=self.mem_total_mib
            - self.huge_pages_mib
            - self.kube_reserved.memory_mib
            - self.eviction_mib,
            pods=self.max_pods,
        )


def kube_reserved_millicpu(millicores: int) -> int:
    """nodeadm's kube-reserved CPU for a node of ``millicores``."""
    reserved = 0
    for start, end, share in KUBE_RESERVED_CPU_RANGES:
        top = millicores if end is None else min(millicores, end)
        if top > start:
            reserved += (top - start) * share // 10000
    return reserved


def node_allocatable(facts: InstanceFacts) -> NodeAllocatable:
    """Allocatable CPU, memory and pods of a ``facts.name`` node on the EKS AL2023 Neuron AMI."""
    max_pods = network_facts(facts.name).max_pods
    nominal = facts.memory_gib * 1024
    return NodeAllocatable(
        instance_type=facts.name,
        vcpus=facts.vcpus,
        nominal_memory_mib=nominal,
        mem_total_mib=nominal - math.ceil(nominal * VM_MEMORY_OVERHEAD_FRACTION),
        huge_pages_mib=EFA_HUGE_PAGES * HUGE_PAGE_MIB,
        kube_reserved=Resources(
            millicpu=kube_reserved_millicpu(facts.vcpus * 1000),
            memory_mib=KUBE_RESERVED_MIB_PER_POD * max_pods + KUBE_RESERVED_MIB_BASE,
        ),
        eviction_mib=EVICTION_HARD_MEMORY_MIB,
        max_pods=max_pods,
    )


#: Left free on every node beyond what is counted: a DaemonSet an add-on update adds, a
#: sidecar a chart grows, requests rounded by a controller. Half a vCPU and 1 GiB.
NODE_MARGIN: Final = Resources(millicpu=500, memory_mib=1024)
#: The training pod keeps at least this share of a node's allocatable CPU and memory; what
#: others reserve beyond it is refused (the workers and their data loaders need the node).
TRAINING_FLOOR: Final = 0.5
#: Requests of the DaemonSets a platform with default settings runs on a multi-node Trainium
#: node: kube-proxy, VPC CNI, pod identity agent, node monitoring agent, EBS and FSx CSI node
#: plugins, Neuron and EFA device plugins, node-exporter, neuron-monitor and the EFA exporter
#: (11 pods). Used where the platform's own figure is not
#: at hand (the TorchX component, the job construct on its own);
#: tests/trainium_eks/test_node_daemons.py keeps it equal to ``trainium_eks.node_daemons`` for
#: the default settings.
DEFAULT_NODE_DAEMONS: Final = Resources(millicpu=531, memory_mib=498, pods=11)


def training_share(facts: InstanceFacts, reserved: Resources = DEFAULT_NODE_DAEMONS) -> Resources:
    """What is left of a ``facts.name`` node's allocatable for the training pod once ``reserved``
    (the DaemonSets and any dataset pod sharing the node) and :data:`NODE_MARGIN` are taken."""
    return node_allocatable(facts).allocatable - reserved - NODE_MARGIN


def share_problem(facts: InstanceFacts, reserved: Resources) -> str | None:
    """Why ``reserved`` leaves the training pod too little of the node (None when it does not):
    less than :data:`TRAINING_FLOOR` of the allocatable CPU or memory, or no pod slot."""
    allocatable = node_allocatable(facts).allocatable
    share = training_share(facts, reserved)
    if (
        share.millicpu >= allocatable.millicpu * TRAINING_FLOOR
        and share.memory_mib >= allocatable.memory_mib * TRAINING_FLOOR
        and share.pods >= 1
    ):
        return None
    return (
        f"that leaves the training pod {share.describe()} ({max(share.pods, 0)} pod slots) of a {facts.name} "
        f"node's allocatable {allocatable.describe()} ({allocatable.pods} pods), less than {TRAINING_FLOOR:.0%}"
    )


def training_resources(facts: InstanceFacts, reserved: Resources = DEFAULT_NODE_DAEMONS) -> Resources:
    """The training pod's CPU and memory (one pod): :func:`training_share`.

    Raises:
        ConfigError: (field ``node_reserved``) see :func:`share_problem`.
    """
    problem = share_problem(facts, reserved)
    if problem:
        raise ConfigError(
            "node_reserved",
            reserved.describe(),
            f"{problem}: reserve less for other pods on the Trainium nodes",
        )
    share = training_share(facts, reserved)
    return Resources(share.millicpu, share.memory_mib, pods=1)
