"""What a job has spent on its nodes, counted by its own pods, and its ceiling.

Every pod keeps one record per start of its program and phase in the budget's ``spend_dir`` (on
FSx, beside the runs, so restarts, redeploys and both phases add to the same sum):
``<node>.<pod>.<start>.json`` holding the node, the pod, the phase, the start and the last time it
was seen (rewritten every ``check_every_s``, whole or not at all). The spend is

    (sum of every record's last - start  +  node_start_s for each node that joined) / 3600
        x the node's price per hour

``node_start_s`` counts what a node bills before its pod's program starts (its launch, join and
image pull), once per node: a gang restarted on the same nodes does not launch them again. A pod
killed without warning loses at most ``check_every_s`` of its record. What the count leaves out
(a node's minutes after its pod ended, until Karpenter removes it) the ceiling's margin covers:
the count is an estimate from list prices, not AWS's bill.

The first pod that finds the spend at the ceiling writes :data:`STOP` naming the ceiling; every
pod of the job stops when it sees it, so the gang stops at one step together. A marker of another
ceiling (the ceiling was raised since) does not count.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ..files import write_whole
from .description import Budget

#: The stop marker, in the spend directory.
STOP: Final = "STOP"


@dataclass(frozen=True)
class Spend:
    """The job's spend so far."""

    node_seconds: float
    nodes: int
    usd: float


def record_path(budget: Budget, *, node: str, pod: str, start: float) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in f"{node}.{pod}")
    return Path(budget.spend_dir) / f"{safe}.{start:.0f}.json"


def write_record(path: Path, *, node: str, pod: str, phase: str, start: float, last: float) -> None:
    """One pod's record, rewritten whole (a reader never sees half of it)."""
    record = {"node": node, "pod": pod, "phase": phase, "start": start, "last": last}
    write_whole(path, json.dumps(record) + "\n")


def _records(budget: Budget) -> list[dict[str, Any]]:
    found = []
    try:
        paths = sorted(Path(budget.spend_dir).glob("*.json"))
    except OSError:
        return []
    for path in paths:
        try:
            record = json.loads(path.read_text())
            found.append(
                {
                    "node": str(record["node"]),
                    "phase": str(record.get("phase", "")),
                    "start": float(record["start"]),
                    "last": float(record["last"]),
                }
            )
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a record being replaced, or not one: the next look counts it
    return found


def spend(budget: Budget) -> Spend:
    """The job's spend from every record in the spend directory."""
    records = _records(budget)
    nodes = {r["node"] for r in records}
    seconds = sum(max(0.0, r["last"] - r["start"]) for r in records) + budget.node_start_s * len(nodes)
    return Spend(seconds, len(nodes), seconds / 3600 * budget.usd_per_node_hour)


def phase_node_hours(budget: Budget, phase: str) -> float:
    """Node-hours the pods of ``phase`` have counted (not the nodes' start, which the job counts)."""
    seconds: float = sum(max(0.0, r["last"] - r["start"]) for r in _records(budget) if r["phase"] == phase)
    return seconds / 3600


def stop_requested(budget: Budget) -> dict[str, Any] | None:
    """The stop marker when it names this budget's ceiling, else None."""
    try:
        marker = json.loads((Path(budget.spend_dir) / STOP).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(marker, dict) or marker.get("ceiling_usd") != budget.usd:
        return None
    return marker


def request_stop(budget: Budget, spent: Spend, *, by: str) -> dict[str, Any]:
    """Write the stop marker (the first pod to see the ceiling); the marker. A marker of the same
    ceiling already there (another pod's, at the same moment) is kept: the pods agree on one."""
    existing = stop_requested(budget)
    if existing is not None:
        return existing
    marker = {"ceiling_usd": budget.usd, "spent_usd": round(spent.usd, 2), "by": by, "time": time.time()}
    write_whole(Path(budget.spend_dir) / STOP, json.dumps(marker) + "\n")
    return marker
