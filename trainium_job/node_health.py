"""The deep node health check's names and what it expects of each Trainium instance type: one table
the CDK library (taints, labels, the DaemonSet) and the training image's check
(``training.node.health_check``) both read. Standard library only.

A Trainium node starts tainted :data:`PENDING_TAINT`; the check labels it :data:`HEALTH_LABEL` =
``passed`` and removes the taint, or labels it ``failed`` and replaces the taint with
:func:`failed_taint` (key :data:`FAILED_TAINT_KEY`) naming the failed check (kube-state-metrics exports it as
``kube_node_spec_taint{key,value,effect}``).

Expected counts and floors, cited from the Neuron documentation (aws-neuron/aws-neuron-sdk at
v2.29.1, the release of the training image's tools, "the Neuron docs" below):

* Neuron devices and NeuronCores: :mod:`trainium_job.instances` (``neuron_devices``,
  ``neuron_cores``), as ``neuron-ls`` counts them: one entry per device, ``nc_count`` NeuronCores
  each at the instance's logical-core setting (tools/neuron-sys-tools/neuron-ls.rst L213-L282:
  a trn2 device lists 4 at LNC=2; a trn1.32xlarge device 2, neuron-runtime/
  nrt-developer-guide.rst L175-L196; a trn1.2xlarge one device of 2, setup/multiframework-dlami.rst
  L132-L139).
* EFA devices: :mod:`trainium_job.instances` ``efa_interfaces``, one RDMA device per EFA interface
  the node is launched with. The Neuron docs: "trn1.32xlarge has 8 EFA devices, trn1n.32xlarge has
  16" (frameworks/torch/torch-neuronx/setup-trn1-multi-node-execution.rst L15); trn1.2xlarge has
  none (the same page L13: "EFA is currently not available on the smaller instances sizes";
  neuron-runtime/nrt-troubleshoot.rst L592-L594). The Neuron docs state no EFA device count for
  trn2.48xlarge: its 16 is the facts table's, to confirm against EC2's
  ``DescribeInstanceTypes`` ``EfaInfo.MaximumEfaInterfaces``.
* The all-reduce bus bandwidth floor: see :data:`MARGIN` and :func:`expectation`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from .instances import INSTANCE_FACTS, InstanceFacts, instance_facts

#: The node label the check sets; same ``trainium-eks/`` prefix as ``trainium_job.scheduling``'s pool label.
HEALTH_LABEL: Final = "trainium-eks/node-health"
PASSED: Final = "passed"
FAILED: Final = "failed"
#: Every Trainium node starts with it (nodegroup taints, Karpenter startupTaints); pods that
#: train do not tolerate it, the Neuron device plugin and the check's DaemonSet do.
PENDING_TAINT: Final = {"key": HEALTH_LABEL, "value": "pending", "effect": "NoSchedule"}
#: The checks, in the order they run (the first failure stops the rest): the two inventories
#: first (a listing each, seconds), then the computation on each NeuronCore alone (one process per
#: core, each compiling on first use: the longest), then the all-reduce across all of them, so a
#: core that computes wrong is named as such rather than as a failed all-reduce.
CHECKS: Final = ("devices", "efa", "compute", "collective")
#: Not a check of this program: the pre-training fabric check names a node with it.
FABRIC: Final = "fabric"
#: Not a check either: the verdict of a node whose checks gave none within
#: :func:`verdict_deadline_s` (they hung, or their process kept ending before a verdict).
NO_VERDICT: Final = "no-verdict"
#: Every value a failed node's taint may carry.
FAILURES: Final = (*CHECKS, FABRIC, NO_VERDICT)
#: core/v1 Event reasons on the Node.
FAILED_REASON: Final = "TrainiumNodeHealthCheckFailed"
REPLACED_REASON: Final = "TrainiumNodeReplaced"
#: A training pod sent its node back to the deep check (a 2-node fabric failure no measurement
#: between the two nodes can pin on one of them).
RECHECK_REASON: Final = "TrainiumNodeRecheck"
#: What a training pod's fabric check does to a node it names (``--heal`` of its verdict):
#: ``off`` nothing (the job aborts, as without the deep check); ``taint`` the node is tainted
#: (named) or sent back to the deep check (2 nodes) and the job restarts; ``replace`` also
#: terminates a named node's instance so the nodegroup or Karpenter brings a fresh one.
HEAL_MODES: Final = ("off", "taint", "replace")
#: The Events' ``source.component`` (and ``reportingComponent``): the DaemonSet's name.
EVENT_COMPONENT: Final = "node-health-check"


#: Key of a failed node's taint. Not the pending taint's: Karpenter holds a node uninitialized
#: while a taint matching one of its NodePool's ``startupTaints`` by key and effect remains
#: (kubernetes-sigs/karpenter v1.14.1 pkg/controllers/nodeclaim/lifecycle/initialization.go
#: L74-77, L115-125, through core/v1 ``Taint.MatchTaint``), and an uninitialized node is never
#: disrupted, so a failed node would stay, empty and paid for, after the job has gone elsewhere.
FAILED_TAINT_KEY: Final = "trainium-eks/node-health-failed"
#: Every taint key the health check writes (a verdict replaces all of them).
HEALTH_TAINT_KEYS: Final = (HEALTH_LABEL, FAILED_TAINT_KEY)


def failed_taint(check: str) -> dict[str, str]:
    """The taint of a node that failed ``check`` (its value names the check)."""
    if check not in FAILURES:
        raise ValueError(f"unknown check {check!r}; one of {', '.join(FAILURES)}")
    return {"key": FAILED_TAINT_KEY, "value": check, "effect": "NoSchedule"}


#: The all-reduce the collective check runs: ``nccom-test``'s default size, 32 MiB
#: (nccom-test.rst L172-L176, ``-b``/``-e`` default 32M; printed as 33554432 bytes, L31-L32), in fp32
#: (training's gradients; a ``-d`` type the page lists, L249-L253).
NCCOM_SIZE_BYTES: Final = 32 * 2**20
NCCOM_DATATYPE: Final = "fp32"
#: Fraction of a documented measurement the floor keeps. The page warns its figures are not
#: up to date (nccom-test.rst L500-L503): half leaves room for release-to-release and run-to-run
#: variation, while a core or a NeuronLink working at a fraction of its speed still fails.
MARGIN: Final = 0.5
#: The page's 2-rank all-reduce at 32 MiB, "quick environment validation": 40.69 GB/s
#: (nccom-test.rst L513-L516, uint8; the page does not name the instance). Two ranks are all the
#: NeuronCores of a trn1.2xlarge. Its fp32 runs of the same 2 ranks measure more (47.06 GB/s at
#: 16 MiB, 51.48 at 64 MiB, L554-L555), so the uint8 figure is the lower one.
TWO_RANK_BUSBW_GBPS: Final = 40.69
#: No page gives a single-instance all-reduce across 32 or 64 NeuronCores. The conservative rule:
#: the lowest all-reduce bus bandwidth the page measures at 32 MiB in any run, 22.69 GB/s (64 ranks
#: across two instances, over EFA, L722; a 16-rank single-instance run measures 22.84, L686).
LOWEST_ALLREDUCE_32MIB_BUSBW_GBPS: Final = 22.69


#: Seconds one tool run of the check may take before it counts as failed: the first compile of
#: a core's graph (neuronx-cc) or the all-reduce with its correctness check.
TOOL_TIMEOUT_S: Final = 600
#: The compute check's core processes run at once (each loads torch and the Neuron runtime).
COMPUTE_PARALLEL: Final = 8
#: Seconds of the verdict's bound for what no tool timeout covers: the program's start (Python,
#: its imports), the EFA listing (a few sysfs reads) and the threads' scheduling.
VERDICT_SLACK_S: Final = 60


def verdict_deadline_s(neuron_cores: int) -> int:
    """Seconds from the check's first start by which a node has a verdict, or never will: the sum
    of the checks' own timeouts, each at its longest (``neuron-ls`` one tool run; the compute
    check ``ceil(cores / COMPUTE_PARALLEL)`` waves of one run per core; ``nccom-test`` one run),
    plus :data:`VERDICT_SLACK_S`. Past it a check waits on something no timeout bounds."""
    waves = -(-neuron_cores // COMPUTE_PARALLEL)
    return TOOL_TIMEOUT_S * (1 + waves + 1) + VERDICT_SLACK_S


@dataclass(frozen=True)
class NodeExpectation:
    """What a healthy node of one instance type shows the check.

    Attributes:
        facts: the instance type's row of :data:`trainium_job.instances.INSTANCE_FACTS`.
        min_busbw_gbps: all-reduce bus bandwidth floor across all NeuronCores, in the GB/s
            nccom-test prints (2^30 bytes/s).
        busbw_basis: where the floor comes from, for the check's message and the docs.
    """

    facts: InstanceFacts
    min_busbw_gbps: float
    busbw_basis: str

    @property
    def instance_type(self) -> str:
        return self.facts.name

    @property
    def neuron_devices(self) -> int:
        return self.facts.neuron_devices

    @property
    def neuron_cores(self) -> int:
        return self.facts.neuron_cores

    @property
    def efa_devices(self) -> int:
        return self.facts.efa_interfaces

    @property
    def verdict_deadline_s(self) -> int:
        """:func:`verdict_deadline_s` for this instance type's NeuronCores."""
        return verdict_deadline_s(self.neuron_cores)


def expectation(instance_type: str) -> NodeExpectation:
    """The expectation for ``instance_type``; ``KeyError`` naming the supported types otherwise."""
    facts = instance_facts(instance_type)
    if facts.neuron_cores == 2:
        return NodeExpectation(
            facts,
            TWO_RANK_BUSBW_GBPS * MARGIN,
            f"{MARGIN:.0%} of the 2-rank all-reduce in Neuron's nccom-test guide ({TWO_RANK_BUSBW_GBPS} GB/s)",
        )
    return NodeExpectation(
        facts,
        LOWEST_ALLREDUCE_32MIB_BUSBW_GBPS * MARGIN,
        f"{MARGIN:.0%} of the lowest 32 MiB all-reduce in Neuron's nccom-test guide "
        f"({LOWEST_ALLREDUCE_32MIB_BUSBW_GBPS} GB/s; it measures no {facts.neuron_cores}-rank single instance)",
    )


#: Every supported instance type's expectation.
EXPECTATIONS: Final[dict[str, NodeExpectation]] = {name: expectation(name) for name in INSTANCE_FACTS}
