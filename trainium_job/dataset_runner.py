"""A dataset pod's program: wait for what it needs, stage with retries, and say so when it gives up.

    python -m trainium_job.dataset_runner '<JSON of DatasetRun>'

1. Its own failed marker of an earlier attempt is removed (this is a new one).
2. Each wait, bounded (:mod:`trainium_job.waits`): phase 2's staging starts once phase 1's shards
   are staged, so that the two never share the file system's throughput.
3. The staging command, up to ``attempts`` times, ``backoff_s`` apart (a download that broke off,
   a throttled request). The pod's SIGTERM is passed on to it.
4. When the last attempt failed (or a wait ran out), the failed marker, naming this Job and the
   command's last error line, and exit ``DEADLINE_EXIT_CODE``: whoever waits for these shards (the
   job's submitter, the training pods before phase 2) ends at once with that reason instead of at
   its deadline, and the Job's pod failure policy does not retry.

The Job's name comes from the pod's ``batch.kubernetes.io/job-name`` label (downward API,
``JOB_NAME_ENV``). Standard library only (the training image runs it).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Final

from .exit_codes import DEADLINE_EXIT_CODE, SIGTERM_EXIT_CODE
from .waits import Wait, clear_failed, wait_for, write_failed

#: The variable the pod's Job name arrives in (the downward API, label ``batch.kubernetes.io/job-name``).
JOB_NAME_ENV: Final = "DATASET_JOB_NAME"
#: The module (``python -m``).
MODULE: Final = "trainium_job.dataset_runner"


@dataclass(frozen=True)
class DatasetRun:
    """What a dataset pod runs.

    Attributes:
        command: the staging command (``bash -c <script>``).
        failed: the failed marker this Job writes when it gives up.
        waits: what must be there first, each bounded.
        attempts: tries of ``command``.
        backoff_s: seconds between two tries.
    """

    command: tuple[str, ...]
    failed: str
    waits: tuple[Wait, ...] = ()
    attempts: int = 3
    backoff_s: int = 30

    def dumps(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True, separators=(",", ":"))

    @classmethod
    def loads(cls, text: str) -> DatasetRun:
        raw = json.loads(text)
        return cls(
            command=tuple(raw["command"]),
            failed=str(raw["failed"]),
            waits=tuple(Wait(**w) for w in raw.get("waits", ())),
            attempts=int(raw.get("attempts", 3)),
            backoff_s=int(raw.get("backoff_s", 30)),
        )


def _relay(stream: IO[str], last: list[str]) -> None:
    """Copy the command's error output to the pod's, keeping its last line (the reason)."""
    for line in stream:
        sys.stderr.write(line)
        sys.stderr.flush()
        if line.strip():
            last[:] = [line.strip()]


def _attempt(command: tuple[str, ...], stop: threading.Event) -> tuple[int, list[str]]:
    """One try of ``command``, the pod's SIGTERM passed on to it: its code and last error line."""
    child = subprocess.Popen(list(command), stderr=subprocess.PIPE, text=True)

    def on_sigterm(*_: object) -> None:
        stop.set()
        child.send_signal(signal.SIGTERM)

    handler = signal.signal(signal.SIGTERM, on_sigterm)
    last: list[str] = []
    relay = threading.Thread(target=_relay, args=(child.stderr, last), daemon=True)
    relay.start()
    try:
        code = child.wait()
        relay.join(5)
    finally:
        signal.signal(signal.SIGTERM, handler)
    return code, last


def run(spec: DatasetRun, *, by: str, stop: threading.Event, say: Callable[[str], None] = print) -> int:
    """The steps of the module docstring; the exit code."""
    clear_failed(spec.failed, by=by)
    for wait in spec.waits:
        result = wait_for(wait, stopped=stop.wait, say=say)
        say(result.line)
        if result.outcome == "stopped":
            return SIGTERM_EXIT_CODE
        if result.outcome != "ready":
            write_failed(spec.failed, by=by, reason=result.line)
            return DEADLINE_EXIT_CODE
    reason = "no attempt ran"
    for attempt in range(1, spec.attempts + 1):
        code, last = _attempt(spec.command, stop)
        if code == 0:
            return 0
        if stop.is_set():
            return SIGTERM_EXIT_CODE
        reason = f"attempt {attempt} of {spec.attempts} exited {code}: {last[0] if last else 'no error line'}"
        say(reason)
        if attempt < spec.attempts and stop.wait(spec.backoff_s):
            return SIGTERM_EXIT_CODE
    write_failed(spec.failed, by=by, reason=reason)
    say(f"gave up after {spec.attempts} attempts: {reason}")
    return DEADLINE_EXIT_CODE


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(f"usage: python -m {MODULE} '<dataset run JSON>'", file=sys.stderr)
        return 2
    spec = DatasetRun.loads(args[0])
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    by = os.environ.get(JOB_NAME_ENV) or "unknown"
    return run(spec, by=by, stop=stop, say=lambda line: print(line, flush=True))


if __name__ == "__main__":
    sys.exit(main())
