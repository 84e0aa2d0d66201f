"""Each entry point loads only what its user's environment installs (tests.environments.closure).

Given: an entry point imported in a fresh interpreter of the development venv (which has more than
any user gets). Then: every distribution a loaded module comes from is in the closure of what that
entry point's user installs; a module from anything else is a dependency the user does not have.
"""

from __future__ import annotations

from functools import cache

import pytest
import tomllib

from tests.environments.closure import (
    REPO,
    closure,
    dockerfile_pip_names,
    loaded_modules,
    names_of,
    origins,
    requirement_names,
    undeclared,
)
from trainium_job.entry_points import ENTRY_POINTS

#: What ``make synth``, ``make deploy``, ``make doctor`` and ``make cdk`` run.
CDK_APP = ("app", "stacks", "trainium_eks", "trainium_eks.doctor.runner")
#: What the CDK app may import from ``training/``: the flag parsers it checks a job's arguments with,
#: reached as the library's copy ``trainium_eks._training`` (the wheel installs no top-level
#: ``training``, so an app's package of that name cannot shadow it).
FLAG_PARSERS = ("training.trainer.cli", "training.dataprep.prep_settings")
LIBRARY_COPY = "trainium_eks._training"
TRAINING_IMAGE = tuple(m for m, image in ENTRY_POINTS.items() if image == "training")
TOOLS_IMAGE = tuple(m for m, image in ENTRY_POINTS.items() if image == "tools")


@cache
def synth_requirements() -> frozenset[str]:
    """What ``make synth`` installs: requirements.txt and what it requires."""
    return closure(requirement_names(REPO / "requirements.txt"))


@cache
def package_requirements() -> frozenset[str]:
    """What ``pip install`` of the wheel installs: pyproject's dependencies and what they require."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return closure(names_of(project["dependencies"]))


def base_image_stack() -> list[str]:
    """The packages the training Dockerfile keeps from the base image's pip freeze (its Neuron stack)."""
    [frozen] = dockerfile_pip_names(REPO / "docker" / "Dockerfile")
    return frozen


def tools_image_packages() -> list[str]:
    [tools] = dockerfile_pip_names(REPO / "docker" / "tensorboard.Dockerfile")
    return tools


def training_image_requirements(without: str = "") -> frozenset[str]:
    names = requirement_names(REPO / "training" / "requirements.txt") | set(base_image_stack())
    return closure(names - {without})


@cache
def loaded(modules: tuple[str, ...]) -> dict[str, str | None]:
    return loaded_modules(modules)


def test_given_the_cdk_app_then_it_loads_only_what_make_synth_installs():
    assert undeclared(loaded(CDK_APP), synth_requirements()) == {}


def test_given_the_library_in_another_app_then_it_loads_only_the_package_dependencies():
    assert undeclared(loaded(("trainium_eks",)), package_requirements()) == {}


def test_given_the_cdk_app_then_it_loads_from_training_only_the_flag_parsers():
    app = loaded(CDK_APP)
    # Through the library's copy only: nothing of a top-level ``training`` package.
    assert {name for name in app if name.split(".")[0] == "training"} == set()
    from_training = {
        "training" + name.removeprefix(LIBRARY_COPY)
        for name in app
        if name.split(".")[:2] == LIBRARY_COPY.split(".")
    }
    parsers = {name for name in loaded(FLAG_PARSERS) if name.split(".")[0] == "training"}
    assert from_training == parsers
    assert from_training >= set(FLAG_PARSERS)


def test_given_the_flag_parsers_then_they_load_the_standard_library_only():
    third_party = {o.module for o in origins(loaded(FLAG_PARSERS)) if o.distribution is not None}
    assert third_party == set()
    assert {name.split(".")[0] for name in loaded(FLAG_PARSERS)} & {"trainium_eks", "aws_cdk"} == set()


def test_given_the_training_image_entry_points_then_they_load_only_its_requirements_and_base_stack():
    assert undeclared(loaded(TRAINING_IMAGE), training_image_requirements()) == {}


def test_given_the_tools_image_entry_points_then_they_load_only_the_packages_it_installs():
    # TensorBoard, the exporters' client, and the submitter's Kubernetes client.
    assert tools_image_packages() == ["tensorboard", "prometheus-client", "kubernetes"]
    assert undeclared(loaded(TOOLS_IMAGE), closure(tools_image_packages())) == {}


# The check itself: each of these must fail.


def test_given_prometheus_client_dropped_from_the_image_requirements_then_the_check_names_it():
    gaps = undeclared(loaded(TRAINING_IMAGE), training_image_requirements(without="prometheus-client"))
    assert "prometheus-client" in gaps
    tools = closure(set(tools_image_packages()) - {"prometheus-client"})
    assert "prometheus-client" in undeclared(loaded(TOOLS_IMAGE), tools)


def test_given_prometheus_client_imported_at_synth_then_the_check_names_it():
    gaps = undeclared(loaded_modules(("trainium_eks", "prometheus_client")), synth_requirements())
    assert set(gaps) == {"prometheus-client"}
    assert "prometheus_client" in gaps["prometheus-client"]


def test_given_a_development_only_package_then_it_is_outside_the_synth_closure():
    # pytest, torch and prometheus-client are in the development venv, not in make synth's.
    assert {"pytest", "torch", "prometheus-client"} & synth_requirements() == set()
    assert {"aws-cdk-lib", "jsii", "boto3", "botocore"} <= synth_requirements()


@pytest.mark.parametrize("module", sorted(ENTRY_POINTS))
def test_given_an_entry_point_then_it_is_a_module_with_a_main(module):
    path = REPO / (module.replace(".", "/") + ".py")
    source = path.read_text()
    assert "def main(" in source
    assert 'if __name__ == "__main__":' in source
