"""The contract imports one way: it loads neither aws-cdk, jsii, torch nor the packages above it."""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import trainium_job

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = ("aws_cdk", "jsii", "constructs", "torch", "trainium_eks", "training")


def _loaded_after(statement: str) -> list[str]:
    """Top-level packages a fresh interpreter has loaded after ``statement``."""
    code = (
        f"import json, sys\n{statement}\nprint(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True, text=True, timeout=120
    ).stdout
    return list(json.loads(out.splitlines()[-1]))


def test_given_every_contract_module_when_imported_fresh_then_no_cdk_jsii_torch_or_upper_package():
    modules = [
        f"trainium_job.{m.name}"
        for m in pkgutil.iter_modules(trainium_job.__path__)
        if m.name != "torchx_component"
    ]
    assert "trainium_job.pod" in modules and "trainium_job.spec" in modules
    loaded = _loaded_after("\n".join(f"import {m}" for m in modules))
    assert "trainium_job" in loaded
    assert [m for m in FORBIDDEN if m in loaded] == []


def test_given_torchx_component_when_imported_fresh_then_no_cdk_jsii_torch_or_upper_package():
    pytest.importorskip("torchx")
    loaded = _loaded_after("import trainium_job.torchx_component")
    assert "torchx" in loaded
    assert [m for m in FORBIDDEN if m in loaded] == []


def test_given_contract_sources_then_they_import_only_the_standard_library_and_each_other():
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    for path in Path(trainium_job.__file__).parent.glob("*.py"):
        allowed = stdlib | ({"torchx"} if path.name == "torchx_component.py" else set())
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            assert [n for n in names if n.split(".")[0] not in allowed] == [], f"{path.name}: {names}"


def _imported_packages(folder: Path) -> dict[str, set[str]]:
    """File -> the top-level packages its (absolute) imports name."""
    out: dict[str, set[str]] = {}
    for path in folder.rglob("*.py"):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
        out[str(path.relative_to(ROOT))] = names
    return out


def test_given_training_package_then_it_imports_the_contract_but_never_the_cdk_library():
    imports = _imported_packages(ROOT / "training")
    assert [f for f, names in imports.items() if names & {"trainium_eks", "aws_cdk", "stacks"}] == []
    assert any("trainium_job" in names for names in imports.values())
