"""The README's commands on a fresh clone, in the environment a new user gets: ``.ci/run`` runs
this first, before anything installs the development requirements.

``make synth`` builds the runtime venv (requirements.txt only) and synthesizes; then, in that same
venv, the other README commands that need no AWS account: ``make cdk ARGS="ls"``, a synth with a
context key, ``make doctor`` without credentials (its clean refusal), and two bad inputs that must
end in one line each. Standard library only: it runs on the machine's own Python.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
STACKS = ["trn-bert-platform", "trn-bert-training"]
#: In the development venv only: none may be importable after ``make synth``.
DEVELOPMENT_ONLY = ("pytest", "prometheus_client", "torch", "h5py")


def run(command: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    """``command`` in the checkout, without AWS credentials or a profile, with ``env`` added."""
    home = tempfile.mkdtemp(prefix="fresh-home-")
    base = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    base.update(HOME=home, AWS_EC2_METADATA_DISABLED="true", **env)
    print("$", " ".join(command), flush=True)
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, env=base, timeout=1800)


def expect(proc: subprocess.CompletedProcess[str], rc: int, *patterns: str) -> str:
    out = proc.stdout + proc.stderr
    assert proc.returncode == rc, f"exit {proc.returncode}, expected {rc}:\n{out[-4000:]}"
    assert "Traceback" not in out and "jsii.errors" not in out, out[-4000:]
    for pattern in patterns:
        assert re.search(pattern, out, re.M), f"{pattern!r} not in:\n{out[-4000:]}"
    return out


def scratch() -> str:
    """An output folder for a synth that must not replace cdk.out."""
    return tempfile.mkdtemp(prefix="fresh-cdk-out-")


def readme_shows(command: str) -> None:
    assert command in README, f"the README no longer shows {command!r}: update tests/fresh_machine.py"


def main() -> int:
    readme_shows("make synth")
    expect(run(["make", "synth"]), 0, r"^Trainium platform 'trn-bert' in us-west-2")
    for stack in STACKS:
        assert (REPO / "cdk.out" / f"{stack}.template.json").is_file(), stack
    python = str(REPO / ".venv" / "bin" / "python")
    for module in DEVELOPMENT_ONLY:
        probe = subprocess.run([python, "-c", f"import {module}"], capture_output=True)
        assert probe.returncode != 0, f"{module} is importable in the runtime venv: not a fresh machine"

    readme_shows('make cdk ARGS="ls"')
    out = run(["make", "cdk", "ARGS=ls"])
    expect(out, 0)
    assert out.stdout.split()[-2:] == STACKS, out.stdout

    readme_shows("-c training_max_steps=5000")
    expect(run(["make", "cdk", f"ARGS=synth --quiet -c training_max_steps=5000 -o {scratch()}"]), 0)

    # The doctor without credentials: one FAIL line and exit 1 (make reports it as its own exit 2).
    readme_shows("make doctor")
    expect(
        run(["make", "doctor"]), 2, r"^FAIL credentials: no AWS credentials found", r"^0 ok, 0 warn, 1 FAIL$"
    )
    # Bad inputs end in one line: an unknown profile (flag and variable), a fabric floor no network reaches.
    expect(run(["make", "doctor", "ARGS=--profile nope"]), 2, r"^error: --profile nope: no such AWS profile")
    expect(run(["make", "doctor"], AWS_PROFILE="nope"), 2, r"^error: AWS_PROFILE nope: no such AWS profile")
    expect(
        run(
            [
                "make",
                "cdk",
                f"ARGS=synth --quiet -c training_fabric_check_min_busbw_gbps=100000 -o {scratch()}",
            ]
        ),
        2,
        r"^error: config 'training_fabric_check_min_busbw_gbps' \(BertJobSpec\.fabric_check_min_busbw_gbps\) = 100000 "
        r"is invalid: .* at most 183\.4 GB/s",
    )
    print(
        "fresh machine: make synth, make cdk ARGS=ls, a context-key synth, make doctor and two bad inputs ok"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
