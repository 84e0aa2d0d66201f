"""Bounded waits for a file on the shared file system: every wait of a pod ends, and says why.

A pod waits for what another pod produces: a shard set (its ``.staged`` marker), a start
checkpoint, a model another pod exports. Each :class:`Wait` has a deadline derived from what it
waits for, and may name the marker its producer writes when it gives up (:func:`write_failed`):
then the wait ends at once, with the producer's reason, instead of at its deadline. A producer's
failed marker counts only when it names the producer the waiter expects (``failed_by``): a
marker left by an earlier deploy's producer says nothing about this one.

Standard library only: the training pods' program (:mod:`trainium_job.pod_program`), the job
submitter (:mod:`trainium_job.submit`) and the dataset pods run it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from .files import write_whole

#: Seconds between two looks at the file, unless a wait says otherwise: a look is one ``stat`` on
#: FSx, and the things waited for take minutes.
DEFAULT_POLL_S: Final = 30

Outcome = Literal["ready", "failed", "deadline", "stopped"]


@dataclass(frozen=True)
class Wait:
    """One bounded wait.

    Attributes:
        what: what is waited for, as the pod's line names it ("phase 1's dataset").
        ready: the file whose existence ends the wait (a marker its producer writes last).
        deadline_s: seconds after the wait's start at which it gives up.
        why: how the deadline was derived (the review and the pod's line at the deadline say it).
        failed: the file the producer writes when it gives up (None: it writes none).
        failed_by: the producer whose failed marker counts (its Kubernetes Job's name).
        poll_s: seconds between two looks.
    """

    what: str
    ready: str
    deadline_s: int
    why: str = ""
    failed: str | None = None
    failed_by: str | None = None
    poll_s: int = DEFAULT_POLL_S

    def __post_init__(self) -> None:
        for name in ("deadline_s", "poll_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"Wait.{name}: {value!r} must be a positive whole number of seconds")
        if (self.failed is None) != (self.failed_by is None):
            raise ValueError("Wait: give failed and failed_by together (the marker and who writes it)")


@dataclass(frozen=True)
class Result:
    """How a wait ended: its outcome, the seconds it took, and the line that says why."""

    outcome: Outcome
    seconds: float
    line: str


def failed_reason(wait: Wait) -> str | None:
    """The reason in ``wait``'s failed marker when its expected producer wrote it, else None."""
    if wait.failed is None:
        return None
    try:
        marker = json.loads(Path(wait.failed).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(marker, dict) or marker.get("by") != wait.failed_by:
        return None
    return str(marker.get("reason") or "no reason given")


def write_failed(path: str, *, by: str, reason: str) -> None:
    """A producer's note that it gave up (``by``: its Job's name), written whole or not at all."""
    write_whole(Path(path), json.dumps({"by": by, "reason": reason, "time": time.time()}) + "\n")


def clear_failed(path: str, *, by: str) -> None:
    """Remove ``by``'s own failed marker at a new attempt (another producer's is left alone)."""
    wait = Wait(what="", ready="", deadline_s=1, failed=path, failed_by=by)
    if failed_reason(wait) is not None:
        Path(path).unlink(missing_ok=True)


def wait_for(
    wait: Wait,
    *,
    stopped: Callable[[float], bool],
    clock: Callable[[], float] = time.monotonic,
    say: Callable[[str], None] = print,
) -> Result:
    """Look for ``wait.ready`` every ``poll_s`` until it exists, its producer gave up, the
    deadline passes or ``stopped`` (which waits up to the given seconds and returns True once the
    pod is asked to stop) says so. One line per look while waiting, one at the end."""
    start = clock()
    while True:
        elapsed = clock() - start
        if Path(wait.ready).exists():
            return Result("ready", elapsed, f"{wait.what}: there ({wait.ready}) after {elapsed:.0f} s")
        reason = failed_reason(wait)
        if reason is not None:
            return Result(
                "failed", elapsed, f"{wait.what}: will not come: {wait.failed_by} gave up: {reason}"
            )
        if elapsed >= wait.deadline_s:
            because = f" ({wait.why})" if wait.why else ""
            return Result(
                "deadline",
                elapsed,
                f"{wait.what}: not there ({wait.ready}) after its deadline of {wait.deadline_s} s{because}",
            )
        say(f"waiting for {wait.what} ({wait.ready}): {elapsed:.0f} s of at most {wait.deadline_s} s")
        if stopped(min(wait.poll_s, wait.deadline_s - elapsed)):
            return Result("stopped", clock() - start, f"{wait.what}: the wait was stopped")
