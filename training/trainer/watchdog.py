"""The step watchdog: a rank whose optimizer step waits past a bound ends its own process, so a hang
becomes a restart that resumes from the newest checkpoint (``trainium_job.hang``).

The training loop tells the watchdog when an optimizer step is done (``stepped``), what it is about
to wait for (``doing``: the next batch, a micro-batch's forward and backward, an all-reduce, the
stop agreement), and when a phase that may take long begins and ends (``paused``: a held-out
evaluation, a checkpoint save). The first ``warmup_steps`` steps of each process have no bound: on
XLA they compile the graphs (``trainium_job.launch.precompile_args`` counts which steps trace a new
one). In the steady state the bound is ``max(floor_s, factor x median of the last `window` step
times)``: the floor keeps a fast step's noise (a slow batch from FSx, rank 0's log line waiting for
the device) from tripping it, the factor follows a model whose steps take minutes. A daemon thread
sleeps until the current step's deadline; past it, it logs one line (rank, the step and what it was waiting
for, the seconds waited, the bound, the last checkpoint), marks the ``bert_train_phase`` metric
``hung`` and ends the process with ``os._exit(HANG_EXIT_CODE)``. ``os._exit`` does not unwind the
main thread, which may be blocked in a collective that never returns; a timer ends the process
as well should writing the line block (a full stderr pipe).

What it cannot catch: a hang inside warm-up, an evaluation or a checkpoint save (the collective
timeout, ``--collective_timeout_s``, bounds what waits in a gloo or NCCL collective there), and a
main thread that blocks while holding the GIL (the watchdog thread then cannot run; a gloo
collective waits without it, as the multi-process CPU test shows; not checked on Neuron). Every rank runs
its own watchdog, so a rank stopped whole (SIGSTOP, a frozen host) is ended by torchrun or the
pod's restart, and its peers by their watchdogs.
"""

from __future__ import annotations

import logging
import os
import statistics
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from trainium_job.hang import HANG_EXIT_CODE
from trainium_job.restarts import write_hang_marker

log = logging.getLogger(__name__)

#: Step times whose median the bound follows.
WINDOW = 50
#: Seconds the process has to write its line before a timer ends it anyway.
EXIT_GRACE_S = 10.0
#: Seconds between the watchdog thread's looks in a phase without a bound.
IDLE_S = 1.0
#: Past the deadline by this much when the thread wakes, so the wait is past the bound.
DEADLINE_MARGIN_S = 0.001


@dataclass(frozen=True)
class HangBound:
    """How long an optimizer step may take (``--hang_floor_s``, ``--hang_factor``,
    ``--hang_warmup_steps``); ``floor_s`` 0: no bound (the watchdog still reports the phase)."""

    floor_s: float
    factor: float
    warmup_steps: int
    window: int = WINDOW

    @property
    def enabled(self) -> bool:
        return self.floor_s > 0

    def seconds(self, step_times: list[float] | deque[float]) -> float:
        """The bound after ``step_times`` (the floor until a step has been timed)."""
        if not step_times:
            return self.floor_s
        return max(self.floor_s, self.factor * statistics.median(step_times))


@dataclass(frozen=True)
class Expiry:
    """A wait past the bound: what the watchdog logs before it ends the process."""

    rank: int
    step: int  # the last optimizer step done
    waiting_for: str
    waited_s: float
    bound_s: float
    bound: HangBound
    timed_steps: int
    median_s: float | None
    last_checkpoint: int | None

    def line(self) -> str:
        if self.median_s is None:
            why = f"--hang_floor_s {self.bound.floor_s:g}; no step timed yet"
        else:
            why = (
                f"max of --hang_floor_s {self.bound.floor_s:g} and --hang_factor {self.bound.factor:g} "
                f"x {_seconds(self.median_s)} s, the median of the last {self.timed_steps} steps"
            )
        resume = (
            f"from the checkpoint of step {self.last_checkpoint}"
            if self.last_checkpoint is not None
            else "from step 0 (no checkpoint yet)"
        )
        return (
            f"hang: rank {self.rank} waiting for {self.waiting_for} for {_seconds(self.waited_s)} s, "
            f"bound {_seconds(self.bound_s)} s ({why}); last step done {self.step}; exiting "
            f"{HANG_EXIT_CODE} so the job restarts {resume}"
        )


class PhaseReport(Protocol):
    """Where the watchdog publishes its phase and bound (``TrainingMetrics.watchdog``)."""

    def watchdog(self, phase: str, bound_s: float | None) -> None: ...


def exit_hung(expiry: Expiry, run_dir: Path | None = None) -> None:
    """Log the expiry, leave the hang marker in ``run_dir`` (when given) and end the process with
    ``HANG_EXIT_CODE``, whatever its other threads do (the backstop timer covers a blocked write)."""
    backstop = threading.Timer(EXIT_GRACE_S, os._exit, args=(HANG_EXIT_CODE,))
    backstop.daemon = True
    backstop.start()
    log.critical("%s", expiry.line())
    if run_dir is not None:
        try:
            write_hang_marker(
                run_dir,
                rank=expiry.rank,
                step=expiry.step,
                waiting_for=expiry.waiting_for,
                last_checkpoint=expiry.last_checkpoint,
            )
        except OSError as e:
            log.error("hang marker not written in %s: %s", run_dir, e)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(HANG_EXIT_CODE)


class StepWatchdog:
    """One rank's watchdog; ``start`` it before the first step and ``close`` it after the last.

    ``clock``, ``on_expiry`` and ``thread=False`` in ``start`` are for tests: ``check`` is what the
    thread calls, and returns the expiry it found (after calling ``on_expiry`` with it).
    """

    def __init__(
        self,
        bound: HangBound,
        *,
        rank: int,
        report: PhaseReport | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_expiry: Callable[[Expiry], None] = exit_hung,
    ) -> None:
        self.bound = bound
        self.rank = rank
        self._report = report
        self._clock = clock
        self._on_expiry = on_expiry
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self._times: deque[float] = deque(maxlen=bound.window)
        self._phase = "warmup"
        self._warmup_left = bound.warmup_steps
        self._since = clock()
        self._step = 0
        self._bound_s = bound.floor_s
        self._doing = "the first optimizer step"
        self.last_checkpoint: int | None = None

    # --- fed by the training loop ----------------------------------------------------------
    def start(self, step: int, *, last_checkpoint: int | None = None, thread: bool = True) -> None:
        """The loop starts after ``step`` (a resumed run: the step of its checkpoint)."""
        with self._lock:
            self._step, self.last_checkpoint = step, last_checkpoint
            self._since = self._clock()
            if self._warmup_left <= 0:
                self._phase = "step"
        self._publish()
        if thread and self.bound.enabled:
            self._thread = threading.Thread(target=self._watch, name="step-watchdog", daemon=True)
            self._thread.start()

    def doing(self, what: str) -> None:
        """What the loop waits for next (a plain assignment: cheap enough for every micro-step)."""
        self._doing = what

    def stepped(self, step: int) -> None:
        """Optimizer step ``step`` is done (after the warm-up steps, its time joins the median)."""
        with self._lock:
            now = self._clock()
            if self._phase == "step":
                self._times.append(now - self._since)
                self._bound_s = self.bound.seconds(self._times)
            elif self._phase == "warmup":
                self._warmup_left -= 1
                if self._warmup_left <= 0:
                    self._phase = "step"
            self._step, self._since = step, now
        self._publish()

    @contextmanager
    def paused(self, phase: str) -> Iterator[None]:
        """A phase with no bound (``evaluation``, ``checkpoint``); the next step is timed from its end."""
        with self._lock:
            previous, self._phase = self._phase, phase
        self._publish()
        try:
            yield
        finally:
            with self._lock:
                self._phase, self._since = previous, self._clock()
            self._publish()

    def checkpointed(self, step: int) -> None:
        """A checkpoint of ``step`` is written: where a restart would resume from."""
        self.last_checkpoint = step

    def close(self) -> None:
        self._closed.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
            self._thread = None

    # --- the watch -------------------------------------------------------------------------
    @property
    def phase(self) -> str:
        return self._phase

    def bound_s(self) -> float | None:
        """The bound in force now; None in a phase without one or with the watchdog off."""
        return self._bound_s if self._phase == "step" and self.bound.enabled else None

    def check(self) -> Expiry | None:
        """An expiry when the current step has waited past the bound (then ``on_expiry`` runs)."""
        with self._lock:
            bound_s = self.bound_s()
            waited = self._clock() - self._since
            if self._closed.is_set() or bound_s is None or waited <= bound_s:
                return None
            expiry = Expiry(
                rank=self.rank,
                step=self._step,
                waiting_for=self._doing,
                waited_s=waited,
                bound_s=bound_s,
                bound=self.bound,
                timed_steps=len(self._times),
                median_s=statistics.median(self._times) if self._times else None,
                last_checkpoint=self.last_checkpoint,
            )
            self._phase = "hung"
        self._publish()
        self._on_expiry(expiry)
        return expiry

    def _watch(self) -> None:
        while not self._closed.wait(self._until_deadline()):
            if self.check() is not None:
                return

    def _until_deadline(self) -> float:
        """Seconds to sleep: to the current step's deadline, or ``IDLE_S`` in a phase with none.

        Waking at the deadline rather than polling makes the ranks stuck in one collective all
        end within milliseconds of each other (they finished the last step together): a rank
        whose peer exits first sees its collective fail, and would exit with that error instead."""
        with self._lock:
            bound_s = self.bound_s()
            if bound_s is None:
                return IDLE_S
            return max(0.0, self._since + bound_s - self._clock()) + DEADLINE_MARGIN_S

    def _publish(self) -> None:
        if self._report is not None:
            self._report.watchdog(self._phase, self.bound_s())


def _seconds(s: float) -> str:
    return f"{s:.1f}" if s < 100 else f"{s:.0f}"
