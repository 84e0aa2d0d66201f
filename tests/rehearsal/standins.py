"""The rehearsal's stand-ins for the tools a pod calls that need Trainium or AWS.

Each pod has them first on its PATH (``/rehearsal/bin/<tool>``: a two-line wrapper that runs
this file with the tool's name). Every call is appended to ``/rehearsal/calls.jsonl`` (tool,
argv, the pod's host name), so a test can tell which pod called what, and how often.
Standard library only: it runs inside the pods, where only the image's Python is on hand.
Why each one stands in: :mod:`tests.rehearsal.substitutions`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

#: Where the rehearsal's own files are mounted in every pod.
MOUNT = Path("/rehearsal")
CALLS = "calls.jsonl"
CONFIG = "standins.json"

#: What ``neuron_parallel_compile`` sets for the trial run it wraps. Not in the Neuron docs,
#: which say only that the tool runs the command "with environment variables that puts your
#: training script into graph extraction mode"; the names and values are those Ray's Neuron
#: integration sets before calling the tool's own ``parallel_compile`` (ray-project/ray,
#: python/ray/train/torch/xla/config.py, ``_set_neuron_parallel_compile_env_vars``).
TRIAL_RUN_ENV = {
    "NEURON_PARALLEL_COMPILE": "1",
    "NEURON_EXTRACT_GRAPHS_ONLY": "1",
    "NEURON_FALL_BACK_TO_NULL_NEFF": "1",
}
#: Written into the cache set named by ``NEURON_CC_FLAGS=--cache_dir=...`` after a trial run
#: that exited 0, where the real tool puts the graphs it compiled.
COMPILED = "rehearsal-compiled.json"
#: ``--cache_dir`` inside NEURON_CC_FLAGS, parsed the way Ray's integration above reads it.
_CACHE_DIR = re.compile(r"--cache_dir[= ](\S+)")


def record(tool: str, argv: Sequence[str], root: Path = MOUNT) -> None:
    """Append one call to ``calls.jsonl`` (one ``write`` of one line: pods call concurrently)."""
    line = json.dumps({"tool": tool, "argv": list(argv), "host": socket.gethostname(), "time": time.time()})
    fd = os.open(root / CALLS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def config(root: Path = MOUNT) -> dict:
    return json.loads((root / CONFIG).read_text())


def neuron_parallel_compile(argv: Sequence[str], root: Path = MOUNT) -> int:
    """Run the command as the tool's trial run; on success mark the cache set it compiled into."""
    if not argv:
        print("neuron_parallel_compile (rehearsal): no command given", file=sys.stderr)
        return 2
    child = subprocess.Popen(list(argv), env={**os.environ, **TRIAL_RUN_ENV})
    # A stop for the tool is passed on to the trial run, which then ends the way torchrun does.
    previous = {
        sig: signal.signal(sig, lambda signum, _frame: child.send_signal(signum))
        for sig in (signal.SIGTERM, signal.SIGINT)
    }
    try:
        code = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    match = _CACHE_DIR.search(os.environ.get("NEURON_CC_FLAGS", ""))
    if code == 0 and match:
        cache = Path(match.group(1))
        cache.mkdir(parents=True, exist_ok=True)
        (cache / COMPILED).write_text(json.dumps({"command": list(argv), "host": socket.gethostname()}))
    return code if code >= 0 else 128 - code


def neuron_ls(argv: Sequence[str], root: Path = MOUNT) -> int:
    """``neuron-ls --json-output``: the recorded output of the pod's instance type (``neuron_ls``
    in the config: tests/training/node/recorded/health), less the last ``device_faults[<host>]``
    devices for a pod whose node has a device fault (a device the driver no longer lists); no
    answer at all for a pod whose node has a hang fault (``hang_faults[<host>]``). Exit 1 for an
    instance type without a recording; anything else: exit 2."""
    cfg = config(root)
    if list(argv) != ["--json-output"]:
        print(f"neuron-ls (rehearsal): only --json-output is rehearsed, not {list(argv)}", file=sys.stderr)
        return 2
    recorded = cfg.get("neuron_ls", {}).get(cfg["instance_type"])
    if recorded is None:
        print(f"neuron-ls (rehearsal): no recorded output for {cfg['instance_type']}", file=sys.stderr)
        return 1
    if cfg.get("hang_faults", {}).get(socket.gethostname()):
        while True:  # a driver that never answers; the pod's end takes this process along
            time.sleep(3600)
    listed = json.loads((root / recorded).read_text())
    missing = cfg.get("device_faults", {}).get(socket.gethostname(), 0)
    print(json.dumps(listed[: len(listed) - missing], indent=4))
    return 0


def nccom_test(argv: Sequence[str], root: Path = MOUNT) -> int:
    """``nccom-test allr -r N ... --check ...``: the recorded all-reduce output of the pod's
    instance type (``nccom_test`` in the config); for a pod whose node has a collective fault
    (``collective_faults[<host>]``: a recorded failed run), that run's output and exit 1 (the
    Neuron docs show the output of a failed run, not its exit code; a failed test exiting 0 is
    covered by the check's unit tests). Anything but an all-reduce with ``-r``: exit 2."""
    cfg = config(root)
    if list(argv[:2]) != ["allr", "-r"] or "--check" not in argv:
        print(
            f"nccom-test (rehearsal): only 'allr -r N ... --check' is rehearsed, not {list(argv)}",
            file=sys.stderr,
        )
        return 2
    failed = cfg.get("collective_faults", {}).get(socket.gethostname())
    if failed is not None:
        sys.stdout.write((root / failed).read_text())
        return 1
    recorded = cfg.get("nccom_test", {}).get(cfg["instance_type"])
    if recorded is None:
        print(f"nccom-test (rehearsal): no recorded output for {cfg['instance_type']}", file=sys.stderr)
        return 1
    sys.stdout.write((root / recorded).read_text())
    return 0


def aws(argv: Sequence[str], root: Path = MOUNT) -> int:
    """``aws s3 cp [--no-sign-request] [--only-show-errors] s3://... DEST``: copies the object's
    local stand-in (``s3_objects`` in the config) to stdout (DEST ``-``, as the shard staging
    streams a tar) or to the file DEST (as the vocabulary's staging fetches it); for an object of
    ``s3_failures``, its error line and exit 1. Anything else: exit 2."""
    args = [a for a in argv if a not in ("--no-sign-request", "--only-show-errors")]
    cfg = config(root)
    objects = cfg["s3_objects"]
    failure = cfg.get("s3_failures", {}).get(args[2] if len(args) > 2 else "")
    if failure is not None:  # the scene's broken source: the CLI's error line, exit 1
        print(failure, file=sys.stderr)
        return 1
    if len(args) != 4 or args[:2] != ["s3", "cp"] or args[2] not in objects:
        print(
            f"aws (rehearsal): only 's3 cp <{' | '.join(objects)}> <- | FILE>' is rehearsed, not {argv}",
            file=sys.stderr,
        )
        return 2
    if args[3] != "-":
        shutil.copyfile(objects[args[2]], args[3])
        return 0
    with open(objects[args[2]], "rb") as source:
        shutil.copyfileobj(source, sys.stdout.buffer, 1 << 20)
    sys.stdout.buffer.flush()
    return 0


def dpkg_query(argv: Sequence[str], root: Path = MOUNT) -> int:
    """``dpkg-query -W -f '${Version}' PACKAGE``: the recorded version of a package of the image
    (``dpkg_versions`` in the config), printed as dpkg prints that format (no newline). Anything
    else: exit 2."""
    versions = config(root)["dpkg_versions"]
    if len(argv) != 4 or list(argv[:3]) != ["-W", "-f", "${Version}"] or argv[3] not in versions:
        print(
            f"dpkg-query (rehearsal): only -W -f '${{Version}}' <{' | '.join(versions)}> is rehearsed, "
            f"not {list(argv)}",
            file=sys.stderr,
        )
        return 2
    sys.stdout.write(versions[argv[3]])
    return 0


def sleep(argv: Sequence[str], root: Path = MOUNT) -> int:
    """``sleep SECONDS``, shortened by the config's ``sleep_scale`` (the pods poll every 30 s)."""
    seconds = float(argv[0]) if len(argv) == 1 else None
    if seconds is None or seconds < 0:
        print(f"sleep (rehearsal): one number of seconds, not {argv}", file=sys.stderr)
        return 2
    time.sleep(seconds * config(root)["sleep_scale"])
    return 0


TOOLS: dict[str, Callable[[Sequence[str], Path], int]] = {
    "neuron_parallel_compile": neuron_parallel_compile,
    "neuron-ls": neuron_ls,
    "nccom-test": nccom_test,
    "aws": aws,
    "dpkg-query": dpkg_query,
    "sleep": sleep,
}


def wrapper(tool: str, python: str) -> str:
    """The ``/rehearsal/bin/<tool>`` script: this file run by ``python`` in isolated mode (the
    pod's PYTHONPATH stays the pod's, for the commands a stand-in runs)."""
    return f'#!/bin/sh\nexec {python} -I {MOUNT / "standins.py"} {tool} "$@"\n'


def main(argv: Sequence[str]) -> int:
    tool, args = argv[0], argv[1:]
    record(tool, args)
    return TOOLS[tool](args, MOUNT)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
