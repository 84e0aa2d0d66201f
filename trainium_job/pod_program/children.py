"""The pod program's child processes: started, waited for with a bound and a tick, told to stop.

The program is the container's PID 1. The kernel delivers to a PID 1 only the signals it handles,
and the kubelet's SIGTERM is the pod's one warning before SIGKILL a grace period later: the
program handles it (:meth:`Children.stop`) by passing SIGTERM on to every child in flight (torchrun
then stops its workers, which checkpoint: ``training.trainer.stop``), and SIGKILLs the children
still running once the grace period, less what the restart ledger's line needs, has passed, so
the line is written before the kubelet's SIGKILL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

#: Seconds between two ticks of a child's wait (the budget's look, the spend record).
TICK_S: Final = 5.0


@dataclass(frozen=True)
class Ended:
    """How a child ended: its exit code (128 + n for a signal n), and whether it ran out of time
    (and was killed) or was stopped by the pod's SIGTERM."""

    code: int
    timed_out: bool = False
    stopped: bool = False


def exit_code(returncode: int) -> int:
    """The shell's code for a child's return code (a signal n as 128 + n)."""
    return returncode if returncode >= 0 else 128 - returncode


class Children:
    """The children in flight, and the pod's stop.

    ``kill_after_s``: seconds after the stop at which children still running are killed.
    ``tick_s``: seconds between two ticks of a wait (:data:`TICK_S`).
    ``popen``: how a child is started.
    """

    def __init__(
        self,
        *,
        kill_after_s: float,
        tick_s: float = TICK_S,
        popen: Callable[..., subprocess.Popen[bytes]] = subprocess.Popen,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kill_after_s = kill_after_s
        self.tick_s = tick_s
        self._popen = popen
        self._clock = clock
        self._running: list[subprocess.Popen[bytes]] = []
        self._stop = threading.Event()
        self._stopped_at: float | None = None

    # --- the pod's stop -------------------------------------------------------------------------
    def stop(self, signum: int = signal.SIGTERM, _frame: object = None) -> None:
        """The pod is stopped: SIGTERM every child in flight, and every child started from now
        on (the signal handler: only flags and ``kill``)."""
        if self._stopped_at is None:
            self._stopped_at = self._clock()
        self._stop.set()
        self.interrupt()

    def interrupt(self) -> None:
        """SIGTERM every child in flight, the pod going on (the spend ceiling's stop)."""
        for child in list(self._running):
            if child.poll() is None:
                try:
                    child.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def pause(self, seconds: float) -> bool:
        """Wait ``seconds``, or less once the pod is told to stop; True when it is."""
        return self._stop.wait(max(0.0, seconds))

    # --- children ------------------------------------------------------------------------------
    def start(self, argv: Sequence[str], env: Mapping[str, str]) -> subprocess.Popen[bytes]:
        """Start ``argv`` (output to the pod's log); one the stop has passed is never started."""
        child = self._popen(list(argv), env=dict(env))
        self._running.append(child)
        if self.stopping and child.poll() is None:
            child.send_signal(signal.SIGTERM)
        return child

    def wait(
        self,
        child: subprocess.Popen[bytes],
        *,
        deadline_s: float | None = None,
        tick: Callable[[], None] | None = None,
    ) -> Ended:
        """Wait for ``child``: it ends, its ``deadline_s`` passes (it is killed), or the pod's stop
        has given it ``kill_after_s`` (it is killed). ``tick`` runs every ``tick_s`` meanwhile."""
        start = self._clock()
        timed_out = False
        while True:
            try:
                child.wait(timeout=self.tick_s)
                break
            except subprocess.TimeoutExpired:
                pass
            now = self._clock()
            if self._stopped_at is not None and now - self._stopped_at >= self.kill_after_s:
                _kill(child)
            elif deadline_s is not None and now - start >= deadline_s and not timed_out:
                timed_out = True
                child.send_signal(signal.SIGTERM)
            elif timed_out and deadline_s is not None and now - start >= deadline_s + self.kill_after_s:
                _kill(child)
            if tick is not None and not self.stopping:
                tick()
        if child in self._running:
            self._running.remove(child)
        return Ended(exit_code(child.returncode), timed_out=timed_out, stopped=self.stopping)

    def run(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        *,
        deadline_s: float | None = None,
        tick: Callable[[], None] | None = None,
    ) -> Ended:
        """Start ``argv`` and wait for it (see :meth:`wait`)."""
        return self.wait(self.start(argv, env), deadline_s=deadline_s, tick=tick)

    def kill_all(self) -> None:
        """SIGKILL every child still running (the program is about to end)."""
        for child in list(self._running):
            _kill(child)


def _kill(child: subprocess.Popen[bytes]) -> None:
    if child.poll() is None:
        try:
            os.kill(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
