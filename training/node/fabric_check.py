"""The fabric health check before training: ``measure`` under torchrun, then ``verdict``.

``measure`` (every worker, launched like training): an all-reduce of ``--size_mib`` per worker,
``--warmup`` times untimed (the first one compiles the graph on Neuron), then ``--iters`` times
timed, through the training backend (``training.trainer.device``: the XLA collectives on Neuron, gloo on
a CPU); the node's EFA byte counters (``training.node.efa_counters``) are read before and after. The
process with ``LOCAL_RANK`` 0 writes the node's result as one JSON object (:data:`RESULT_FIELDS`);
an error on the way is written as ``error`` (for example the device runtime missing). With two
nodes or more the result also holds every node's name; with three or more, the bus bandwidth
between the workers of every pair of nodes (``--pair_size_mib``, ``--pair_iters``; an error there
is ``pairs_error`` and leaves the full measurement standing).

Bus bandwidth is the all-reduce's algorithm bandwidth (bytes per worker / time of one op) times
``2 (n - 1) / n`` for ``n`` workers, in the "GB/s" Neuron's nccom-test prints, which are
gibibytes per second (NCCOM-TEST User Guide of the image's Neuron 2.29.1, aws-neuron/aws-neuron-sdk
tag v2.29.1 tools/neuron-sys-tools/nccom-test.rst L58-L61 and "Bus Bandwidth Calculation"
L69-L125), so the floor compares with its figures.

``verdict`` reads the result and prints one line naming the node: exit 0, or
``trainium_job.fabric_check_steps.EXIT_CODE`` when libfabric is not told to use ``efa``, no EFA device
is visible, fewer bytes crossed EFA than the all-reduce must move between nodes (the collectives
fell back to TCP sockets: "if they are constant, messages are not sent over EFA",
aws-samples/awsome-distributed-training 4.validation_and_observability/3.efa-node-exporter
README), or the bus bandwidth is below the floor; ``NOT_MEASURED_EXIT_CODE`` when otherwise the
measurement did not run or broke off (no verdict on the fabric: the job restarts). When the bus
bandwidth failed, more lines say which node the pairs single out, which link is slow, or why none
is named (:func:`training.node.fabric_pairs.localize`); :class:`Verdict` carries the names.
With ``--heal taint`` or ``replace`` (the platform's deep node health check is on), each pod then
acts on its own node when it is named or to be re-checked, and the gang restarts without it
(:func:`heal`).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainium_job.fabric_check_steps import EXIT_CODE, NOT_MEASURED_EXIT_CODE
from trainium_job.node_health import FABRIC, HEAL_MODES

from .efa_counters import SYSFS_ROOT, bytes_moved, devices
from .fabric_pairs import localize, pairs_in_order, round_robin

if TYPE_CHECKING:
    from ..trainer.device import Backend

#: Keys of a node's result (``measure`` writes them; ``verdict`` and the recorded results in
#: tests/training/trainer/data/fabric_check/ use them).
RESULT_FIELDS = (
    "node",  # NODE_NAME (downward API), else the host name
    "world_size",  # workers in the all-reduce
    "size_bytes",  # all-reduce buffer per worker
    "iters",  # timed all-reduces
    "seconds_per_op",  # mean time of one timed all-reduce
    "busbw_gbps",  # bus bandwidth, GB/s as nccom-test prints them (2^30 bytes/s)
    "provider",  # FI_PROVIDER of the environment
    "efa_devices",  # EFA devices with counters on the node
    "efa_bytes",  # growth of the EFA byte counters over the timed all-reduces
    "error",  # why it could not measure (only then)
    "nodes",  # every node's name, by node index (GROUP_RANK); 2 nodes or more
    "pairs",  # 3 nodes or more: [{"nodes": [name, name], "seconds_per_op", "busbw_gbps"}, ...]
    "pair_size_bytes",  # all-reduce buffer per worker of the pair measurements
    "pair_iters",  # timed all-reduces per pair
    "pairs_error",  # why the pair measurements broke off (only then; the full one stands)
)
#: Longest node name the result carries: a DNS name (RFC 1035 section 2.3.4: 255 octets).
_NAME_BYTES = 255
#: Share of the bytes an all-reduce must move between nodes that must show on the EFA counters.
#: Each node must receive at least (nodes - 1) / nodes of a worker's buffer per all-reduce; the
#: counters sum both directions and every path, so a working fabric is far above this, and a
#: fallback to sockets leaves them where they were.
MIN_EFA_SHARE = 0.1


def bus_bandwidth_gbps(size_bytes: int, seconds: float, world_size: int) -> float:
    """All-reduce bus bandwidth in nccom-test's GB/s (2^30 bytes/s): ``size / time x 2 (n - 1) / n``."""
    return size_bytes / seconds * 2 * (world_size - 1) / world_size / 2**30


def _node() -> str:
    return os.environ.get("NODE_NAME") or socket.gethostname()


def _error(e: Exception) -> str:
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__


def measure(args: argparse.Namespace) -> int:
    """Time the all-reduce on every worker, then (2 nodes or more) gather the nodes' names and
    (3 or more) time the pairs; LOCAL_RANK 0 writes the node's result."""
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    size = args.size_mib * 1024 * 1024
    result: dict[str, Any] = {
        "node": _node(),
        "world_size": world,
        "size_bytes": size,
        "iters": args.iters,
        "provider": os.environ.get("FI_PROVIDER", ""),
        "efa_devices": len(devices(args.sysfs)),
    }
    stage = "error"  # where an exception is recorded: the full measurement's, then the pairs'
    try:
        import torch

        from ..trainer.device import make_backend, select_device

        backend = make_backend(select_device("auto"), local_rank, rank, world)
        backend.init_distributed()
        buffer = torch.ones(size // 4, dtype=torch.float32, device=backend.device)
        for _ in range(args.warmup):
            buffer = backend.all_reduce_mean(buffer)
            backend.mark_step()
        backend.synchronize()
        backend.barrier()
        before, started = bytes_moved(args.sysfs), time.perf_counter()
        for _ in range(args.iters):
            buffer = backend.all_reduce_mean(buffer)
            backend.mark_step()
        backend.synchronize()
        seconds = (time.perf_counter() - started) / args.iters
        result.update(
            seconds_per_op=seconds,
            busbw_gbps=bus_bandwidth_gbps(size, seconds, world),
            efa_bytes=bytes_moved(args.sysfs) - before,
        )
        nodes = world // local_world
        if nodes >= 2:
            # From here a failure leaves the full measurement standing (``pairs_error``).
            stage = "pairs_error"
            result["nodes"] = _node_names(backend, node=rank // local_world, nodes=nodes)
        if nodes >= 3:
            result.update(
                pair_size_bytes=args.pair_size_mib * 1024 * 1024,
                pair_iters=args.pair_iters,
                pairs=_measure_pairs(
                    backend,
                    names=result["nodes"],
                    local_world=local_world,
                    size=args.pair_size_mib * 1024 * 1024,
                    iters=args.pair_iters,
                    warmup=args.pair_warmup,
                ),
            )
        # The process groups stay up until the process ends: training.trainer.worker_exit.
    except Exception as e:
        result[stage] = _error(e)
        raise
    finally:
        if local_rank == 0:
            write_result(Path(args.result_file), result)
    return 0


def write_result(path: Path, result: dict[str, Any]) -> None:
    """``result`` at ``path`` whole or not at all: written beside it, then renamed over it. When
    another worker of the node fails, torchrun stops this one (SIGTERM) wherever it is, and the
    rehearsal saw it stopped between a plain write's truncation and its data: the verdict then
    read an empty file."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(result, sort_keys=True) + "\n")
    os.replace(partial, path)


def read_result(path: Path) -> dict[str, Any] | None:
    """The node's result, or None when none was written whole (what :func:`judge` takes as no
    result: the measurement did not end)."""
    try:
        result = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return result if isinstance(result, dict) else None


def _node_names(backend: Backend, *, node: int, nodes: int) -> list[str]:
    """Every node's name by node index: each node's workers write its name's bytes into its row of
    a zero table, and an all-reduce (MAX) over the job fills in the others' (a tensor collective:
    the XLA process group has no object collectives)."""
    import torch
    import torch.distributed as dist

    table = torch.zeros(nodes, _NAME_BYTES, dtype=torch.float32)
    name = _node().encode()[:_NAME_BYTES]
    table[node, : len(name)] = torch.tensor(list(name), dtype=torch.float32)
    table = table.to(backend.device)
    dist.all_reduce(table, op=dist.ReduceOp.MAX)
    backend.mark_step()
    rows = table.cpu().to(torch.uint8).tolist()
    return [bytes(code for code in row if code).decode(errors="replace") for row in rows]


def _measure_pairs(
    backend: Backend, *, names: list[str], local_world: int, size: int, iters: int, warmup: int
) -> list[dict[str, Any]]:
    """Time an all-reduce between the workers of each pair of nodes, in the rounds of disjoint
    pairs of :func:`training.node.fabric_pairs.round_robin`; the pairs of a round run at once.

    torchrun numbers the workers node by node: node ``i`` holds ranks ``i * local_world`` up to
    ``(i + 1) * local_world`` (torch.distributed.elastic's ``_assign_worker_ranks``,
    torch/distributed/elastic/agent/server/api.py L585-660 at torch 2.13). Each pair gets a
    process group of its own; ``new_group`` must be entered by every rank for every group, in one
    order (torch.distributed's ``new_group`` docstring), so all are made before the first round.
    On the XLA process group a subgroup's collectives run with the group's ranks as the replica
    group (torch-xla 2.9 ``new_xla_process_group``, torch_xla/distributed/xla_backend.py
    L454-496); each pair's graph compiles once (then the Neuron cache on FSx holds it).

    The ``warmup`` all-reduces also wait for the partner still busy with the previous round, so
    that wait is not timed. Each pair's time is its slowest worker's (MAX over the job, after the
    rounds), its bus bandwidth that of ``2 * local_world`` workers.

    Duration added, 16 nodes of 32 workers at the defaults (32 MiB, 1 + 5 all-reduces per pair)
    and a fabric right at the 10 GB/s floor: a pair's algorithm bandwidth is 10 x 64 / (2 x 63) =
    5.08 GB/s, so one all-reduce takes 32 MiB / 5.08 GiB/s = 6.2 ms and a round 6 x 6.2 = 37 ms;
    15 rounds add 0.55 s (faster on a faster fabric), against 0.62 s for the full check's 25
    all-reduces of 128 MiB at the same floor. Not in that figure: making the 120 groups and, on the
    first run of a job size, compiling each node's 15 pair graphs.
    """
    import torch
    import torch.distributed as dist

    node = backend.rank // local_world
    order = pairs_in_order(len(names))
    groups = {
        pair: dist.new_group([r for n in pair for r in range(n * local_world, (n + 1) * local_world)])
        for pair in order
    }
    seconds = torch.zeros(len(order), dtype=torch.float32)
    # Zeros: a sum of zeros stays zero, however many all-reduces (ones would overflow to inf).
    buffer = torch.zeros(size // 4, dtype=torch.float32, device=backend.device)
    for round_ in round_robin(len(names)):
        mine = [pair for pair in round_ if node in pair]
        if not mine:  # an odd node count: this node sits the round out
            continue
        group = groups[mine[0]]
        for _ in range(warmup):
            dist.all_reduce(buffer, group=group)
            backend.mark_step()
        backend.synchronize()
        started = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(buffer, group=group)
            backend.mark_step()
        backend.synchronize()
        seconds[order.index(mine[0])] = (time.perf_counter() - started) / iters
    gathered = seconds.to(backend.device)
    dist.all_reduce(gathered, op=dist.ReduceOp.MAX)
    backend.mark_step()
    return [
        {
            "nodes": [names[a], names[b]],
            "seconds_per_op": s,
            "busbw_gbps": bus_bandwidth_gbps(size, s, 2 * local_world) if s > 0 else 0.0,
        }
        for (a, b), s in zip(order, gathered.cpu().tolist(), strict=True)
    ]


@dataclass(frozen=True)
class Verdict:
    """The one line about a node's result, the exit code that goes with it, and (when the bus
    bandwidth failed) which nodes are to blame.

    Every node's verdict carries the same names: each node's result holds the whole pair table.
    """

    line: str
    exit_code: int  # 0, EXIT_CODE (the fabric failed) or NOT_MEASURED_EXIT_CODE
    #: Nodes the pair measurements single out (3 nodes or more; only when the bandwidth failed):
    #: the ones to take out of service, for the node health check's failed check ``fabric``.
    named_nodes: tuple[str, ...] = ()
    #: Slow pairs no named node explains (a link), as (node, node); with no floor failure too.
    slow_pairs: tuple[tuple[str, str], ...] = ()
    #: Nodes to re-check with their own deep check (``training.node.health_check``): both nodes
    #: of a 2-node job whose bandwidth failed, which no measurement between them can tell apart.
    recheck_nodes: tuple[str, ...] = ()
    #: Lines after ``line``: the node or link named, or why none is.
    findings: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return self.exit_code == 0


def judge(result: dict[str, Any] | None, *, min_busbw_gbps: float, nodes: int, seconds: float) -> Verdict:
    """The verdict on a node's result (None: no result was written). What the node's
    configuration shows (the provider, the EFA devices) is judged even when the measurement broke
    off; a measurement that did not run or broke off is no verdict on the fabric."""
    if result is None:
        return Verdict(
            f"fabric check FAILED on node {_node()} after {seconds:.0f} s: it wrote no result",
            NOT_MEASURED_EXIT_CODE,
        )
    node = result.get("node") or _node()
    failed = f"fabric check FAILED on node {node} after {seconds:.0f} s:"
    if result.get("provider") != "efa":
        return Verdict(f"{failed} FI_PROVIDER is {result.get('provider')!r}, not 'efa'", EXIT_CODE)
    if not result.get("efa_devices"):
        return Verdict(
            f"{failed} no EFA device under {SYSFS_ROOT} (is the EFA device plugin running?)", EXIT_CODE
        )
    if result.get("error"):
        return Verdict(f"{failed} could not measure ({result['error']})", NOT_MEASURED_EXIT_CODE)
    must_cross = result["iters"] * result["size_bytes"] * (nodes - 1) / nodes
    if result["efa_bytes"] < MIN_EFA_SHARE * must_cross:
        return Verdict(
            f"{failed} {result['efa_bytes']:,} bytes crossed EFA during an all-reduce that moves at least "
            f"{must_cross:,.0f} between nodes: the collectives are not on EFA (TCP fallback?)",
            EXIT_CODE,
        )
    busbw = result["busbw_gbps"]
    if busbw < min_busbw_gbps:
        return _blame(
            result,
            Verdict(
                f"{failed} all-reduce bus bandwidth {busbw:.1f} GB/s is below the floor of "
                f"{min_busbw_gbps:g} GB/s (training_fabric_check_min_busbw_gbps)",
                EXIT_CODE,
            ),
            min_busbw_gbps=min_busbw_gbps,
            nodes=nodes,
        )
    passed = Verdict(
        f"fabric check passed on node {node} in {seconds:.0f} s: all-reduce bus bandwidth {busbw:.1f} GB/s "
        f"(floor {min_busbw_gbps:g}), {result['efa_bytes'] / 1e9:.2f} GB over {result['efa_devices']} EFA devices",
        0,
    )
    # The job's fabric is fast enough: a slow pair is worth a line, not a node taken out.
    return _blame(result, passed, min_busbw_gbps=min_busbw_gbps, nodes=nodes)


def _pairs(result: dict[str, Any]) -> dict[tuple[str, str], float]:
    return {(p["nodes"][0], p["nodes"][1]): float(p["busbw_gbps"]) for p in result.get("pairs") or ()}


def _blame(result: dict[str, Any], verdict: Verdict, *, min_busbw_gbps: float, nodes: int) -> Verdict:
    """``verdict`` with what the pair measurements say about which node or link is slow."""
    floor = f"{min_busbw_gbps:g} GB/s"
    table = _pairs(result)
    if nodes == 2 and not verdict.passed:
        both = tuple(result.get("nodes") or (result.get("node") or _node(),))
        line = (
            "fabric check names no node: with 2 nodes no measurement between them can tell which one is "
            f"slow; re-check both with the node health check: {', '.join(both)}"
        )
        return replace(verdict, recheck_nodes=both, findings=(line,))
    if result.get("pairs_error"):
        return replace(
            verdict,
            findings=()
            if verdict.passed
            else (f"fabric check names no node: the pairs broke off ({result['pairs_error']})",),
        )
    if not table:
        return verdict
    where = localize(table, floor_gbps=min_busbw_gbps)
    findings: list[str] = []
    for bad in where.named_nodes if not verdict.passed else ():
        with_it = ", ".join(f"{a} - {b} {table[a, b]:.1f}" for a, b in sorted(table) if bad in (a, b))
        findings.append(
            f"fabric check names node {bad}: every pair with it is below {floor} ({with_it} GB/s), "
            "a pair without it is not"
        )
    slow_pairs = (
        where.slow_links if not verdict.passed else tuple(p for p in table if table[p] < min_busbw_gbps)
    )
    for a, b in slow_pairs:
        findings.append(f"fabric check: the link {a} - {b} is slow, {table[a, b]:.1f} GB/s below {floor}")
    if not verdict.passed and where.fabric_wide:
        findings.append(
            f"fabric check names no node: every pair of nodes is below {floor} (the fabric, not a node)"
        )
    elif not verdict.passed and not (where.named_nodes or slow_pairs):
        findings.append(
            f"fabric check names no node: every pair of nodes reaches {floor}, only all together is slow"
        )
    return replace(
        verdict,
        named_nodes=where.named_nodes if not verdict.passed else (),
        slow_pairs=slow_pairs,
        findings=tuple(findings),
    )


def verdict(args: argparse.Namespace) -> Verdict:
    """Judge the result file and print the verdict (then its findings, one line each)."""
    result = read_result(Path(args.result_file))
    outcome = judge(result, min_busbw_gbps=args.min_busbw_gbps, nodes=args.nodes, seconds=args.seconds)
    out = sys.stdout if outcome.passed else sys.stderr
    for line in (outcome.line, *outcome.findings):
        print(line, file=out, flush=True)
    return outcome


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m training.node.fabric_check", description=__doc__.splitlines()[0]
    )
    steps = p.add_subparsers(dest="step", required=True)
    m = steps.add_parser("measure", help="time an all-reduce across the job (run it under torchrun)")
    m.add_argument("--result_file", required=True, help="where LOCAL_RANK 0 writes the node's result")
    m.add_argument("--size_mib", type=int, default=128, help="all-reduce buffer per worker (fp32)")
    m.add_argument("--iters", type=int, default=20, help="timed all-reduces")
    m.add_argument("--warmup", type=int, default=5, help="untimed all-reduces first")
    m.add_argument(
        "--pair_size_mib", type=int, default=32, help="pair all-reduce buffer per worker (3+ nodes)"
    )
    m.add_argument("--pair_iters", type=int, default=5, help="timed all-reduces per pair")
    m.add_argument("--pair_warmup", type=int, default=1, help="untimed all-reduces per pair first")
    m.add_argument("--sysfs", type=Path, default=SYSFS_ROOT, help="where the EFA counters are")
    v = steps.add_parser("verdict", help="one line about the result; exit code 0 or the check's")
    v.add_argument("result_file")
    v.add_argument("--min_busbw_gbps", type=float, required=True, help="bus bandwidth floor, GB/s")
    v.add_argument("--nodes", type=int, required=True, help="nodes of the job")
    v.add_argument("--seconds", type=float, default=0.0, help="how long the check took (for the log)")
    v.add_argument(
        "--heal",
        choices=HEAL_MODES,
        default="off",
        help="on a failure that names nodes: off (exit 69, the job aborts), taint (mark this pod's "
        "node if named, or send it back to the deep check, and exit 75 so the job restarts), replace "
        "(taint, and terminate a named node's instance)",
    )
    v.add_argument(
        "--recheck",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="with --heal, a node of a failed 2-node check goes back to the deep check (default); "
        "--no-recheck marks it failed instead",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.step == "measure":
        return measure(args)
    outcome = verdict(args)
    if args.heal == "off" or outcome.exit_code != EXIT_CODE:
        return outcome.exit_code
    return heal(outcome, _node(), replace=args.heal == "replace", recheck=args.recheck)


def heal(outcome: Verdict, node: str, *, replace: bool, recheck: bool = True, actions: Any = None) -> int:
    """Act on a failed fabric check that names nodes, then the exit code that restarts the job
    without them. Each pod acts on its own node only (every pod's verdict carries the same names):
    a named node is marked failed (taint ``trainium-eks/node-health-failed=fabric``, from
    ``trainium_job.node_health.failed_taint``; an Event; its instance terminated with
    ``replace``), a node to re-check goes back to the deep check. Then
    every pod of the gang exits :data:`NOT_MEASURED_EXIT_CODE`, which the Job restarts (no policy
    names it), so one pod's 69 cannot abort the job the others are healing. With no name (a
    fabric-wide fault) or an action that failed, :data:`EXIT_CODE`: the job aborts as without the
    deep check. ``recheck`` False (Karpenter, where the deep check runs only on new nodes): a node
    to re-check is marked failed instead. ``actions``: the module that talks to Kubernetes
    (``training.node.node_actions``)."""
    if not (outcome.named_nodes or outcome.recheck_nodes):
        return outcome.exit_code
    if actions is None:
        from . import node_actions as actions
    message = outcome.findings[0] if outcome.findings else outcome.line
    try:
        if node in outcome.named_nodes or (node in outcome.recheck_nodes and not recheck):
            actions.mark_failed(node, FABRIC, message, replace=replace)
            print(
                f"fabric check: node {node} marked failed and tainted; the job restarts without it",
                flush=True,
            )
        elif node in outcome.recheck_nodes:
            actions.request_recheck(node, message)
            print(
                f"fabric check: node {node} sent back to the deep health check; the job restarts", flush=True
            )
    except Exception as e:  # the API refused or is unreachable: no healing, the job aborts
        print(f"fabric check: could not act on node {node} ({_error(e)}); aborting the job", file=sys.stderr)
        return outcome.exit_code
    return NOT_MEASURED_EXIT_CODE


if __name__ == "__main__":
    from ..trainer.worker_exit import run_worker

    run_worker(main)
