"""The public API is what the package root lists, and its users import it from there: module
paths below the root are not public and move (docs/architecture.md, Packages)."""

from __future__ import annotations

import re
from pathlib import Path

import trainium_eks

ROOT = Path(__file__).resolve().parents[2]
#: The library's users in this tree: the app and its stacks, the example app, every doc sample.
USERS = (
    ROOT / "app.py",
    *sorted((ROOT / "stacks").glob("*.py")),
    *sorted((ROOT / "examples").rglob("*.py")),
    ROOT / "README.md",
    *sorted((ROOT / "docs").rglob("*.md")),
)
_IMPORT = re.compile(r"from (trainium_eks(?:\.\w+)+) import (\([^)]*\)|[^\n]*)")


def test_given_the_package_root_then_every_listed_name_imports_from_it():
    namespace: dict[str, object] = {}
    exec("from trainium_eks import *", namespace)  # what a user's star import gets
    assert sorted(set(trainium_eks.__all__)) == sorted(trainium_eks.__all__), "a name is listed twice"
    assert [name for name in trainium_eks.__all__ if name not in namespace] == []


def test_given_the_librarys_users_then_public_names_come_from_the_package_root():
    public = set(trainium_eks.__all__)
    deep = [
        f"{path.relative_to(ROOT)}: from {module} import {name}"
        for path in USERS
        for module, names in _IMPORT.findall(path.read_text())
        for name in re.split(r"[(),\s]+", names)
        if name in public
    ]
    assert deep == [], "import these from trainium_eks itself"


def test_given_a_deep_import_of_a_public_name_then_the_check_finds_it():
    # The pattern the check above relies on, on both forms a user writes
    one = _IMPORT.findall("from trainium_eks.nodes.nodegroup import TrainiumNodegroup\n")
    many = _IMPORT.findall(
        "from trainium_eks.config import (\n    PlatformConfig,\n    config_from_context,\n)\n"
    )
    assert one == [("trainium_eks.nodes.nodegroup", "TrainiumNodegroup")]
    assert many and many[0][0] == "trainium_eks.config"
    assert {"PlatformConfig", "config_from_context"} <= set(re.split(r"[(),\s]+", many[0][1]))
