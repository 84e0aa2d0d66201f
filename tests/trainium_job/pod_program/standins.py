"""Commands a test description runs in place of torchrun, the checks and the export: one small
Python script, told by its arguments what to do, that appends what it did to a log."""

from __future__ import annotations

import sys
from pathlib import Path

#: ``standin.py LOG NAME [--touch PATH]... [--sleep S] [--exit N] [--env VAR]... [--exists PATH]...``:
#: log "NAME <VAR values> <PATH=0|1 whether it exists>", touch the files, sleep (a SIGTERM ends
#: it: "NAME stopped", exit 143), then exit N.
SCRIPT = r"""
import os, signal, sys, time
log, name, *rest = sys.argv[1:]
touch, sleep, code, env, exists = [], 0.0, 0, [], []
while rest:
    flag, value, *rest = rest
    if flag == "--touch": touch.append(value)
    elif flag == "--sleep": sleep = float(value)
    elif flag == "--exit": code = int(value)
    elif flag == "--env": env.append(value)
    elif flag == "--exists": exists.append(value)
def note(text):
    with open(log, "a") as f:
        f.write(text + "\n")
def stopped(*_):
    note(f"{name} stopped")
    sys.exit(143)
signal.signal(signal.SIGTERM, stopped)
seen = [f"{v}={os.environ.get(v, '')}" for v in env] + [f"{p}={int(os.path.exists(p))}" for p in exists]
note(" ".join([name, *seen]))
for path in touch:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    open(path, "a").close()
deadline = time.monotonic() + sleep
while time.monotonic() < deadline:
    time.sleep(0.02)
sys.exit(code)
"""


class Standins:
    """Argv lists for a test description, all logging to one file under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.script = root / "standin.py"
        self.script.write_text(SCRIPT)
        self.log = root / "calls.log"

    def argv(self, name: str, *args: str) -> tuple[str, ...]:
        return (sys.executable, str(self.script), str(self.log), name, *args)

    def calls(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def names(self) -> list[str]:
        return [line.split()[0] for line in self.calls()]
