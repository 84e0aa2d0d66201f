"""The fabric health check every training pod runs before the first training step: its two commands.

Two steps, each runnable on its own (an offline rehearsal swaps ``torchrun`` for a stand-in); the
pod program (:mod:`trainium_job.pod_program`) runs them from the job's description:

1. ``torchrun ... -m training.node.fabric_check measure``: the job's own launch (same nodes, workers,
   rendezvous endpoint and environment) times an all-reduce across every worker and reads the
   node's EFA byte counters before and after it; each node's ``LOCAL_RANK`` 0 writes one JSON
   result to :data:`RESULT_FILE` in its pod.
   With three or more nodes it then times an all-reduce between every pair of nodes
   (``training.node.fabric_pairs``), so that a slow fabric can be pinned on a node or a link.
2. ``python -m training.node.fabric_check verdict``: reads that result and prints one line naming the
   node (and, when the bandwidth failed, lines naming the slow node or link); it exits
   :data:`EXIT_CODE` when the bus bandwidth is below the floor, too few bytes crossed EFA,
   libfabric is told to use another provider, or no EFA device is visible. The
   Volcano Job maps that exit code to ``AbortJob`` (``trainium_job.pod``), so a bad fabric stops
   the job instead of restarting it. A measurement that did not run is no verdict on the fabric:
   it exits :data:`NOT_MEASURED_EXIT_CODE`, which the Job restarts like any failed pod.

Why not Neuron's ``nccom-test``: across nodes it runs through MPI over SSH (``--hosts`` with
``NEURON_RT_ROOT_COMM_ID``; NCCOM-TEST User Guide, "Multi-node with MPI", aws-neuron-sdk
tools/neuron-sys-tools/nccom-test.rst at v2.29.1 L301-L331). The training image has ``mpirun`` and
``sshd`` (aws-neuron/deep-learning-containers pytorch/training/2.9.0/Dockerfile.neuronx L76-93),
but using them needs an SSH daemon and keys in every training pod (Volcano's ``ssh`` plugin),
the inbound SSH the platform removed from the reference. The torchrun check goes through the
launch path training uses, which is what a missing EFA allocation breaks.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final

from .entry_points import FABRIC_CHECK
from .launch import LaunchSpec, torchrun_args
from .node_health import HEAL_MODES

#: Exit code of a failed check: EX_UNAVAILABLE of sysexits(3) ("a service is unavailable"),
#: used by nothing else in the worker script (pretrain: 0, 2, 143; torchrun: 1; bash: 126/127;
#: the driver check: 78).
EXIT_CODE: Final = 69
#: Exit code of a check whose measurement did not run or broke off: EX_TEMPFAIL of sysexits(3)
#: ("the user is invited to retry"). The commonest cause is a pod of the gang deleted (drained,
#: evicted, restarted) during the all-reduce, which breaks it off on every other pod within a
#: second; with :data:`EXIT_CODE` those pods made the Job abort where Volcano was restarting it
#: (found by the offline rehearsal). No Job policy names it, so PodFailed's RestartJob applies.
NOT_MEASURED_EXIT_CODE: Final = 75
#: Module of both steps (in the training image).
MODULE: Final = FABRIC_CHECK
#: Where the measurement leaves its result, inside the pod (not on FSx: one per node).
RESULT_FILE: Final = "/tmp/fabric-check.json"
#: Bus bandwidth floor of the default job, in the GB/s nccom-test prints (gibibytes per second).
#: Neuron's two-instance all-reduce example measures 39.19 GB/s at 128 MiB and 22.69 GB/s at
#: 32 MiB (NCCOM-TEST User Guide, nccom-test.rst at v2.29.1 L691-L728); traffic on the pods' eth0 instead of
#: EFA is bounded by the primary interface's link, far below. 10 GB/s stops a broken fabric
#: without tripping on the overhead of timing through torch-xla; raise it to what the first
#: healthy run logs.
DEFAULT_MIN_BUSBW_GBPS: Final = 10


#: Bits of the instance's network line rate (Gbps, 10^9 bit/s) per GB/s of the check (2^30 byte/s).
_GBPS_PER_GIBPS: Final = 8 * 2**30 / 1e9


def busbw_ceiling_gbps(*, network_gbps: float, nodes: int, workers: int) -> float:
    """The highest all-reduce bus bandwidth ``nodes`` instances with ``network_gbps`` each can show,
    in the check's GB/s (2^30 bytes/s); ``workers`` ranks in all.

    Bus bandwidth is the algorithm bandwidth (size / time) times 2(n-1)/n for n ranks (nccl-tests
    doc/PERFORMANCE.md, "Bus bandwidth", the definition nccom-test's busbw column follows). Whatever
    the algorithm (ring, or reduce inside each node first), every node must send at least
    2 x size x (N-1)/N bytes over its network for N nodes, so size / time <= line rate x N/(2(N-1)),
    and the bus bandwidth <= line rate x N(n-1)/(n(N-1)): about twice the line rate on 2 nodes
    (where a hierarchical all-reduce does exceed the network: NVIDIA/nccl-tests issue 196), the
    line rate on many. A floor above it fails on a healthy fabric.
    """
    if nodes < 2:
        raise ValueError("the fabric check spans at least 2 nodes")
    line = network_gbps / _GBPS_PER_GIBPS
    return line * nodes * (workers - 1) / (workers * (nodes - 1))


@dataclass(frozen=True)
class FabricCheck:
    """What the check measures and the floor it holds the fabric to.

    Attributes:
        min_busbw_gbps: all-reduce bus bandwidth floor in nccom-test's GB/s (2^30 bytes/s); 0
            checks only that EFA is used.
        size_mib: all-reduce buffer per worker (fp32). 128 MiB: large enough to be
            bandwidth-bound (Neuron's example reaches 83% of its 1 GiB figure there).
        iters: timed all-reduces.
        warmup: untimed all-reduces first (the first compiles the graph on Neuron).
        pair_size_mib: all-reduce buffer per worker between two nodes (3 nodes or more: the pairs
            that name a slow node, ``training.node.fabric_pairs``). A quarter of ``size_mib`` so
            the pairs add little time; Neuron's two-instance figure at 32 MiB, 22.69 GB/s
            (nccom-test.rst L691-L728), is still twice the default floor the pairs are held to.
        pair_iters: timed all-reduces per pair (after one untimed).
        heal: what a failure that names nodes does to them (:data:`trainium_job.node_health.HEAL_MODES`):
            ``off``, the default, aborts the job as before; the training job sets ``taint`` or
            ``replace`` when the platform's deep node health check is on.
        recheck: with ``heal``, a node of a failed 2-node check goes back to the deep check
            (``--no-recheck``: it is marked failed instead; see ``trainium_job.job.FabricHeal``).
    """

    min_busbw_gbps: int = DEFAULT_MIN_BUSBW_GBPS
    size_mib: int = 128
    iters: int = 20
    warmup: int = 5
    pair_size_mib: int = 32
    pair_iters: int = 5
    heal: str = "off"
    recheck: bool = True

    def __post_init__(self) -> None:
        if self.heal not in HEAL_MODES:
            raise ValueError(f"FabricCheck.heal is {self.heal!r}; one of {', '.join(HEAL_MODES)}")


def measure_args(spec: LaunchSpec, check: FabricCheck, *, result_file: str = RESULT_FILE) -> list[str]:
    """torchrun of the measurement with the job's launch: its own rendezvous id, no restarts."""
    args = (
        "measure",
        "--result_file",
        result_file,
        "--size_mib",
        str(check.size_mib),
        "--iters",
        str(check.iters),
        "--warmup",
        str(check.warmup),
        "--pair_size_mib",
        str(check.pair_size_mib),
        "--pair_iters",
        str(check.pair_iters),
    )
    trial = replace(
        spec,
        module=MODULE,
        script=None,
        script_args=args,
        rdzv_id=f"{spec.rdzv_id}-fabric-check",
        max_restarts=0,
    )
    return torchrun_args(trial)


def verdict_args(check: FabricCheck, *, nodes: int, result_file: str = RESULT_FILE) -> list[str]:
    """The verdict's command; the pod program appends ``--seconds <the check's seconds>``."""
    return [
        "python",
        "-m",
        MODULE,
        "verdict",
        result_file,
        "--min_busbw_gbps",
        str(check.min_busbw_gbps),
        "--nodes",
        str(nodes),
        *(["--heal", check.heal] if check.heal != "off" else []),
        *(["--no-recheck"] if check.heal != "off" and not check.recheck else []),
    ]


def title(spec: LaunchSpec, check: FabricCheck) -> str:
    """The pod's line before the check."""
    return f"fabric check: all-reduce across {spec.nnodes} nodes, floor {check.min_busbw_gbps} GB/s"
