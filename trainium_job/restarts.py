"""A run's restart ledger: why each attempt of a job ended, what that cost, which nodes were named.
Standard library only (the pod program and the trainer both write it, the trainer reads it).

``<output_dir>/restarts.jsonl`` (:data:`trainium_job.paths.RESTART_LEDGER`) holds one JSON object
per line, of two kinds:

``{"event": "end", "time": 1767225600.0, "host": "ip-10-0-1-5.ec2.internal", "cause": "hang",
"exit_code": 86, "step": 1234, "checkpoint": 1200, "checkpoint_time": 1767225000.0, "by": "trainer",
"detail": "step 1235's all-reduce"}``
    A process ended without finishing. ``time``: Unix seconds of the end; ``host``: the node
    (``NODE_NAME`` of the downward API, else ``HOSTNAME``); ``cause``: one of :data:`CAUSES`;
    ``exit_code``: the code that told the cause (None when unknown); ``step``: the last optimizer
    step done, when known (a hang marker says it); ``checkpoint`` and ``checkpoint_time``: the
    newest complete checkpoint then (None before the first); ``by``: ``script`` (the pod's
    program, :mod:`trainium_job.pod_program`) or ``trainer`` (rank 0 at the next start); ``detail``: what a hung rank
    waited for.
``{"event": "resume", "time": ..., "host": ..., "checkpoint": 1200}``
    Rank 0 of the trainer started training (from that checkpoint; None: from step 0). These lines
    close a restart and give the time it was over.

Who appends what:

- the pod program, when it ends non-zero (:func:`record_end`): the cause follows its exit code
  (:func:`trainium_job.exit_codes.cause_of`): the driver check's 78 ``driver``, the fabric check's
  69 and 75 ``fabric``, a wait past its deadline 66 ``data``, the spend ceiling 77 ``budget``, 143
  ``preemption`` (the SIGTERM of a drain, an eviction, the end of a Capacity Block, or Volcano
  restarting the gang), 86 ``hang``, any other ``failure``;
- the step watchdog, before it ends a hung process: a marker per rank under
  ``<output_dir>/hang/`` (:func:`write_hang_marker`); whoever appends next (the pod program, or rank 0
  of the workers torchrun starts again) turns the markers into one ``hang`` line per node
  (:func:`drain_hang_markers`), since torchrun itself exits 1 whatever its workers' codes;
- rank 0 of the trainer at every start: the markers, then a ``failure`` line when torchrun
  restarted its workers and no marker says why (``TORCHELASTIC_RESTART_COUNT`` above 0), then
  its ``resume`` line.

``device`` is in the vocabulary but nothing detects it yet: a Neuron runtime error ends the
process with torchrun's 1, a ``failure``.

A line is one ``write`` to a file opened with ``O_APPEND``; a reader skips a line that does not
parse, so a torn line costs that line only.

Reading (:func:`restarts`): one incident of a gang ends every pod, and the pods Volcano stops
record 143, so the lines are grouped into restarts: a ``resume`` line closes the current one, and
an ``end`` line more than :data:`GROUP_WINDOW_S` after the first line of the current restart opens
the next. A restart's cause is the first of :data:`CAUSES` among its lines (a hang beats the
preemption it caused on the other pods). Its lost time is wall time: from the newest point the
run could go back to (its last checkpoint, the resume of the attempt that failed, or the end of
the previous restart, whichever is latest) to the next ``resume``: the steps redone plus the
time without training. The compile of the next attempt's first steps is not in it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from .exit_codes import cause_of
from .hang import HANG_EXIT_CODE
from .paths import HANG_MARKERS, RESTART_LEDGER

#: Why an attempt ended, most telling first: a restart takes the first cause among its lines
#: (``data``: a wait passed its deadline or its input will never come; ``budget``: the spend
#: ceiling; both end the job rather than restart it: ``trainium_job.exit_codes``).
CAUSES: Final = ("hang", "device", "fabric", "driver", "data", "budget", "failure", "preemption")
#: Causes that name the node of their line as a suspect.
NODE_CAUSES: Final = ("hang", "device", "fabric", "driver")
#: Seconds within which the ends of one incident's pods are recorded: the pods Volcano stops have
#: the 45 s grace period (``trainium_job.stop_budget``) and the controller's reaction before it.
GROUP_WINDOW_S: Final = 120.0
#: Checkpoint directories (``training.trainer.checkpoint``: ``checkpoints/step_00000200``, complete
#: once ``meta.json`` is in it under its final name).
CHECKPOINT_DIR: Final = "checkpoints"
_STEP_RE: Final = re.compile(r"^step_(\d{8})$")
_META: Final = "meta.json"


def this_host() -> str:
    """The node this pod runs on (``NODE_NAME``), else the pod's host name."""
    return os.environ.get("NODE_NAME") or os.environ.get("HOSTNAME") or socket.gethostname()


@dataclass(frozen=True)
class Entry:
    """One ledger line (see the module docstring)."""

    event: str  # "end" or "resume"
    time: float
    host: str | None = None
    cause: str | None = None
    exit_code: int | None = None
    step: int | None = None
    checkpoint: int | None = None
    checkpoint_time: float | None = None
    by: str | None = None
    detail: str | None = None

    def line(self) -> str:
        return json.dumps({k: v for k, v in asdict(self).items() if v is not None}, sort_keys=False) + "\n"

    @classmethod
    def parse(cls, text: str) -> Entry | None:
        """The entry of one line; None for a line that is not one (torn, or from a newer writer)."""
        try:
            obj = json.loads(text)
            entry = cls(
                event=str(obj["event"]),
                time=float(obj["time"]),
                host=_opt(obj, "host", str),
                cause=_opt(obj, "cause", str),
                exit_code=_opt(obj, "exit_code", int),
                step=_opt(obj, "step", int),
                checkpoint=_opt(obj, "checkpoint", int),
                checkpoint_time=_opt(obj, "checkpoint_time", float),
                by=_opt(obj, "by", str),
                detail=_opt(obj, "detail", str),
            )
        except (ValueError, TypeError, KeyError, AttributeError):
            return None
        if (entry.event == "end" and entry.cause in CAUSES) or entry.event == "resume":
            return entry
        return None


def _opt(obj: dict[str, Any], key: str, kind: type) -> Any:
    value = obj.get(key)
    return None if value is None else kind(value)


def append(ledger: Path, entries: Iterable[Entry]) -> None:
    """Append ``entries``, each line in one write to the file opened ``O_APPEND``."""
    ledger.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        for entry in entries:
            os.write(fd, entry.line().encode())
    finally:
        os.close(fd)


def read(ledger: Path) -> list[Entry]:
    """The ledger's entries in file order; none when it does not exist."""
    try:
        text = ledger.read_text(errors="replace")
    except FileNotFoundError:
        return []
    return [e for e in (Entry.parse(line) for line in text.splitlines() if line.strip()) if e is not None]


def newest_checkpoint(run_dir: Path) -> tuple[int, float] | None:
    """(step, Unix time written) of the newest complete checkpoint under ``run_dir``."""
    found: list[tuple[int, float]] = []
    try:
        children = list((run_dir / CHECKPOINT_DIR).iterdir())
    except OSError:
        return None
    for child in children:
        m = _STEP_RE.match(child.name)
        if not m:
            continue
        try:
            found.append((int(m.group(1)), (child / _META).stat().st_mtime))
        except OSError:
            continue
    return max(found) if found else None


def _end(run_dir: Path, **fields: Any) -> Entry:
    newest = newest_checkpoint(run_dir)
    return Entry(
        event="end",
        checkpoint=newest[0] if newest else None,
        checkpoint_time=newest[1] if newest else None,
        **fields,
    )


# --- hang markers -------------------------------------------------------------------------------


def write_hang_marker(
    run_dir: Path, *, rank: int, step: int, waiting_for: str, last_checkpoint: int | None
) -> None:
    """The step watchdog's note before it ends a hung rank: ``hang/<host>.rank<N>.json``."""
    host = this_host()
    marker = {
        "time": time.time(),
        "host": host,
        "rank": rank,
        "step": step,
        "waiting_for": waiting_for,
        "last_checkpoint": last_checkpoint,
    }
    directory = run_dir / HANG_MARKERS
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{host.replace('/', '_')}.rank{rank:05d}.json").write_text(json.dumps(marker) + "\n")


def drain_hang_markers(run_dir: Path, *, by: str) -> list[Entry]:
    """One ``hang`` entry per node of the markers under ``run_dir``, which are removed (a marker
    another reader removed first is theirs to record)."""
    hung: dict[str, list[dict[str, Any]]] = {}
    try:
        markers = sorted((run_dir / HANG_MARKERS).glob("*.json"))
    except OSError:
        return []
    for path in markers:
        try:
            marker = json.loads(path.read_text())
            path.unlink()
        except (OSError, ValueError):
            continue
        if isinstance(marker, dict):
            hung.setdefault(str(marker.get("host") or path.name.split(".rank")[0]), []).append(marker)
    entries = []
    for host, ranks in sorted(hung.items()):
        first = min(ranks, key=lambda m: (float(m.get("time") or 0), int(m.get("rank") or 0)))
        entries.append(
            _end(
                run_dir,
                time=float(first.get("time") or time.time()),
                host=host,
                cause="hang",
                exit_code=HANG_EXIT_CODE,
                step=_int_or_none(first.get("step")),
                by=by,
                detail=str(first.get("waiting_for") or "") or None,
            )
        )
    return entries


def _int_or_none(value: Any) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


# --- what the writers append ---------------------------------------------------------------------


def record_end(run_dir: Path, exit_code: int, *, now: float | None = None) -> list[Entry]:
    """The pod program's lines when it exits ``exit_code`` (none for 0, or before the run's
    directory exists): the hang markers left, then its own end."""
    if exit_code == 0 or not run_dir.is_dir():
        # No run directory: the pod ended before the dataset was there (the program creates the
        # directory after that wait), so no attempt of the run began and nothing was lost; and a
        # pod that never got that far leaves FSx as it found it.
        return []
    entries = drain_hang_markers(run_dir, by="script")
    entries.append(
        _end(
            run_dir,
            time=time.time() if now is None else now,
            host=this_host(),
            cause=cause_of(exit_code),
            exit_code=exit_code,
            by="script",
        )
    )
    append(run_dir / RESTART_LEDGER, entries)
    return entries


def record_start(
    run_dir: Path, *, checkpoint: int | None, torchrun_restart: int, now: float | None = None
) -> list[Entry]:
    """Rank 0's lines at a start: the hang markers left, a ``failure`` when torchrun restarted its
    workers for no recorded reason, and the ``resume``."""
    now = time.time() if now is None else now
    entries = drain_hang_markers(run_dir, by="trainer")
    if torchrun_restart > 0 and not entries:
        entries.append(
            _end(run_dir, time=now, cause="failure", by="trainer", detail="torchrun restarted the workers")
        )
    entries.append(Entry(event="resume", time=now, host=this_host(), checkpoint=checkpoint))
    append(run_dir / RESTART_LEDGER, entries)
    return entries


# --- reading -----------------------------------------------------------------------------------


@dataclass
class Restart:
    """One incident: the lines recorded for it, its cause, the time it cost."""

    first: float  # time of its first line
    floor: float | None  # the last resume before it, or the end of the restart before it
    entries: list[Entry] = field(default_factory=list)
    resumed: float | None = None  # the next resume (or the next restart's first line)

    @property
    def cause(self) -> str:
        return min((e.cause for e in self.entries if e.cause), key=CAUSES.index, default="failure")

    @property
    def since(self) -> float:
        """The newest point the run could go back to: its newest checkpoint, or the floor."""
        points = [p for p in (self.floor, *(e.checkpoint_time for e in self.entries)) if p is not None]
        return max(points) if points else self.first

    @property
    def end(self) -> float:
        return self.resumed if self.resumed is not None else max(e.time for e in self.entries)

    @property
    def lost_s(self) -> float:
        return max(0.0, self.end - self.since)

    @property
    def nodes(self) -> dict[str, str]:
        """Node -> cause, for the lines whose cause names their node."""
        return _named((e.host, e.cause) for e in self.entries if e.host and e.cause in NODE_CAUSES)


def _named(pairs: Iterable[tuple[str | None, str | None]]) -> dict[str, str]:
    named: dict[str, str] = {}
    for host, cause in pairs:
        if host and cause and (host not in named or CAUSES.index(cause) < CAUSES.index(named[host])):
            named[host] = cause
    return named


def restarts(entries: Sequence[Entry]) -> list[Restart]:
    """The ledger's lines grouped into restarts, oldest first (see the module docstring)."""
    found: list[Restart] = []
    current: Restart | None = None
    floor: float | None = None
    for e in sorted(entries, key=lambda e: e.time):
        if e.event == "resume":
            if current is not None:
                current.resumed, current = e.time, None
            floor = e.time
            continue
        if current is None or e.time - current.first > GROUP_WINDOW_S:
            if current is not None:  # no resume in between: the previous restart lasted until now
                current.resumed = floor = e.time
            current = Restart(first=e.time, floor=floor)
            found.append(current)
        current.entries.append(e)
    return found


@dataclass(frozen=True)
class Totals:
    """Restarts and lost seconds per cause (every one of :data:`CAUSES`), and per (node, cause)
    the restarts that named the node."""

    count: dict[str, int]
    lost_s: dict[str, float]
    nodes: dict[tuple[str, str], int]

    @property
    def total(self) -> int:
        return sum(self.count.values())


def totals(found: Sequence[Restart]) -> Totals:
    count = dict.fromkeys(CAUSES, 0)
    lost = dict.fromkeys(CAUSES, 0.0)
    nodes: dict[tuple[str, str], int] = {}
    for r in found:
        count[r.cause] += 1
        lost[r.cause] += r.lost_s
        for named in r.nodes.items():
            nodes[named] = nodes.get(named, 0) + 1
    return Totals(count, lost, nodes)


def summary_line(t: Totals) -> str:
    """One line: ``restarts: 3 (hang 1, preemption 2); lost 14 min (hang 9, preemption 5); nodes
    named: ip-10-0-1-5 (hang 1)``, or ``restarts: none``."""
    if not t.total:
        return "restarts: none"
    causes = [c for c in CAUSES if t.count[c]]
    lost = sum(t.lost_s.values())
    unit, scale = ("s", 1.0) if lost < 60 else ("min", 60.0)
    by_count = ", ".join(f"{c} {t.count[c]}" for c in causes)
    by_lost = ", ".join(f"{c} {t.lost_s[c] / scale:.0f}" for c in causes)
    per_node: dict[str, list[str]] = {}
    for (host, cause), n in sorted(t.nodes.items(), key=lambda kv: (kv[0][0], CAUSES.index(kv[0][1]))):
        per_node.setdefault(host, []).append(f"{cause} {n}")
    nodes = ", ".join(f"{host} ({', '.join(c)})" for host, c in per_node.items()) or "none"
    return (
        f"restarts: {t.total} ({by_count}); lost {lost / scale:.0f} {unit} ({by_lost}); nodes named: {nodes}"
    )


def ledger_summary(run_dir: Path) -> str:
    """The summary line of the run in ``run_dir``."""
    return summary_line(totals(restarts(read(run_dir / RESTART_LEDGER))))


def main(argv: list[str] | None = None) -> int:
    """``end --run-dir DIR --exit-code N``: the pod program's line when it ends non-zero (by hand);
    ``summary --run-dir DIR``: print the summary line. Never fails the caller: an error is one
    line on stderr and exit 0."""
    parser = argparse.ArgumentParser(prog="python -m trainium_job.restarts")
    parser.add_argument("command", choices=("end", "summary"))
    parser.add_argument("--run-dir", required=True, type=Path)
    parser.add_argument("--exit-code", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        if args.command == "end":
            # Silent when written: the pod's last line stays the one that says why it ended.
            record_end(args.run_dir, args.exit_code)
        else:
            print(ledger_summary(args.run_dir))
    except OSError as e:
        print(f"restart ledger: not written: {e}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
