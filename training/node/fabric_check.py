"""The fabric health check before training: ``measure`` under torchrun, then ``verdict``.

``measure`` (every worker, launched like training): an all-reduce of ``--size_mib`` per worker,
``--warmup`` times untimed (the first one compiles the graph on Neuron), then ``--iters`` times
timed, through the training backend (``training.trainer.device``: the XLA collectives on Neuron, gloo on
a CPU); the node's EFA byte counters (``training.node.efa_counters``) are read before and after. The
process with ``LOCAL_RANK`` 0 writes the node's result as one JSON object (:data:`RESULT_FIELDS`);
an error on the way is written as ``error`` (for example the device runtime missing).

Bus bandwidth is the all-reduce's algorithm bandwidth (bytes per worker / time of one op) times
``2 (n - 1) / n`` for ``n`` workers, in the "GB/s" Neuron's nccom-test prints, which are
gibibytes per second (NCCOM-TEST User Guide, aws-neuron-sdk tools/neuron-sys-tools/nccom-test.rst
L58-61 and "Bus Bandwidth Calculation" L69-120), so the floor compares with its figures.

``verdict`` reads the result and prints one line naming the node: exit 0, or
``trainium_job.fabric_check.EXIT_CODE`` when libfabric is not told to use ``efa``, no EFA device
is visible, fewer bytes crossed EFA than the all-reduce must move between nodes (the collectives
fell back to TCP sockets: "if they are constant, messages are not sent over EFA",
aws-samples/awsome-distributed-training 4.validation_and_observability/3.efa-node-exporter
README), or the bus bandwidth is below the floor; ``NOT_MEASURED_EXIT_CODE`` when otherwise the
measurement did not run or broke off (no verdict on the fabric: the job restarts).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from training.node.efa_counters import SYSFS_ROOT, bytes_moved, devices
from trainium_job.fabric_check import EXIT_CODE, NOT_MEASURED_EXIT_CODE

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
)
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


def measure(args: argparse.Namespace) -> int:
    """Time the all-reduce on every worker; LOCAL_RANK 0 writes the node's result."""
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    size = args.size_mib * 1024 * 1024
    result: dict[str, Any] = {
        "node": _node(),
        "world_size": world,
        "size_bytes": size,
        "iters": args.iters,
        "provider": os.environ.get("FI_PROVIDER", ""),
        "efa_devices": len(devices(args.sysfs)),
    }
    try:
        import torch

        from training.trainer.device import make_backend, select_device

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
        backend.shutdown()
    except Exception as e:
        lines = str(e).strip().splitlines()
        result["error"] = f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__
        raise
    finally:
        if local_rank == 0:
            Path(args.result_file).write_text(json.dumps(result, sort_keys=True) + "\n")
    return 0


@dataclass(frozen=True)
class Verdict:
    """The one line about a node's result, and the exit code that goes with it."""

    line: str
    exit_code: int  # 0, EXIT_CODE (the fabric failed) or NOT_MEASURED_EXIT_CODE

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
        return Verdict(
            f"{failed} all-reduce bus bandwidth {busbw:.1f} GB/s is below the floor of {min_busbw_gbps:g} GB/s "
            "(training_fabric_check_min_busbw_gbps)",
            EXIT_CODE,
        )
    return Verdict(
        f"fabric check passed on node {node} in {seconds:.0f} s: all-reduce bus bandwidth {busbw:.1f} GB/s "
        f"(floor {min_busbw_gbps:g}), {result['efa_bytes'] / 1e9:.2f} GB over {result['efa_devices']} EFA devices",
        0,
    )


def verdict(args: argparse.Namespace) -> int:
    path = Path(args.result_file)
    result = json.loads(path.read_text()) if path.is_file() else None
    outcome = judge(result, min_busbw_gbps=args.min_busbw_gbps, nodes=args.nodes, seconds=args.seconds)
    print(outcome.line, file=sys.stdout if outcome.passed else sys.stderr, flush=True)
    return outcome.exit_code


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
    m.add_argument("--sysfs", type=Path, default=SYSFS_ROOT, help="where the EFA counters are")
    v = steps.add_parser("verdict", help="one line about the result; exit code 0 or the check's")
    v.add_argument("result_file")
    v.add_argument("--min_busbw_gbps", type=float, required=True, help="bus bandwidth floor, GB/s")
    v.add_argument("--nodes", type=int, required=True, help="nodes of the job")
    v.add_argument("--seconds", type=float, default=0.0, help="how long the check took (for the log)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return measure(args) if args.step == "measure" else verdict(args)


if __name__ == "__main__":
    sys.exit(main())
