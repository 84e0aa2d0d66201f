"""Constraints that pin each of the library's declared dependencies to the lowest version its range
allows: ``python tests/package/lowest.py OUT`` writes them to OUT for ``pip install -c OUT``.

``make test-package`` installs the wheel once with these and once with ``constraints.txt`` (the
pins), so both ends of every range in ``pyproject.toml`` are synthesized before a release claims
them. Only the direct dependencies are pinned low; what they need resolves as pip chooses.
"""

from __future__ import annotations

import sys
from pathlib import Path

import tomllib
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]


def lowest_pins(dependencies: list[str]) -> list[str]:
    """``name==X`` for each requirement, X its ``>=`` (or ``==``/``~=``) bound; a requirement with
    no lower bound is an error: its lowest version would be whatever the index's oldest is."""
    pins = []
    for text in dependencies:
        requirement = Requirement(text)
        lows = [s.version for s in requirement.specifier if s.operator in (">=", "==", "~=")]
        if len(lows) != 1:
            raise ValueError(f"pyproject.toml dependency {text!r}: give exactly one lower bound (>=)")
        pins.append(f"{requirement.name}=={lows[0]}")
    return pins


def main(out: str) -> int:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    Path(out).write_text("\n".join(lowest_pins(project["dependencies"])) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
