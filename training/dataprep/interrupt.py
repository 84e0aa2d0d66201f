"""SIGINT and SIGTERM as an exception, so a long-running tool cleans up and exits 130/143.

The handler raises :class:`Interrupted` in the main thread once, and records the signal. Some
C extensions swallow exceptions raised inside their callbacks (an HDF5 write can), so code also
calls :func:`check` between steps: a recorded signal is never lost. Inside
:func:`deferred_signals` the signal is only recorded, for steps that must not stop half way
(publishing a set by two renames); the caller looks at :func:`received` afterwards.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(Exception):
    """A stop signal arrived; ``exit_code`` is the shell's 128 + signal number (130, 143)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.exit_code = 128 + signum
        super().__init__(f"interrupted by {signal.Signals(signum).name}")


_received: int | None = None
_deferred = False
_owner: int | None = None  # the process that installed the handler


def _handle(signum: int, _frame: object) -> None:
    global _received
    if os.getpid() != _owner:
        # A forked worker, before its initializer reset the handlers: behave as it will after.
        if signum == signal.SIGTERM:
            os._exit(128 + signum)
        return
    first = _received is None
    if first:
        _received = signum
    if first and not _deferred:
        raise Interrupted(signum)


def received() -> int | None:
    """The first stop signal received inside :func:`stop_on_signals`, if any."""
    return _received


def check() -> None:
    """Raise :class:`Interrupted` if a stop signal arrived (and was perhaps swallowed)."""
    if _received is not None:
        raise Interrupted(_received)


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Turn SIGINT/SIGTERM into :class:`Interrupted` for the duration (main thread only)."""
    global _received, _owner
    _received, _owner = None, os.getpid()
    previous = {sig: signal.signal(sig, _handle) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def deferred_signals() -> Iterator[None]:
    """Only record a stop signal while the block runs; the caller checks :func:`received` after."""
    global _deferred
    _deferred = True
    try:
        yield
    finally:
        _deferred = False


def ignore_interactive_interrupt() -> None:
    """For worker processes: Ctrl-C reaches the whole process group, but only the parent
    should react (it stops the workers and removes their output). SIGTERM gets its default
    action back (a forked worker inherits the parent's handler): the worker just ends."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
