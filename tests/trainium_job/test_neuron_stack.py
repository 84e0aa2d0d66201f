"""The image's Neuron stack, .venv-xla's pins and trainium_job.neuron_stack agree."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from trainium_job.neuron_stack import NEURON_STACK, NeuronStack, version_tuple

REPO = Path(__file__).resolve().parents[2]


def pinned(path: Path) -> dict[str, str]:
    """name -> version of the ``name==version`` lines of a requirements/constraints file."""
    pins = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s;#]+)", line.strip())
        if m:
            pins[m.group(1).lower().replace("_", "-")] = m.group(2)
    return pins


def dockerfile_base_image() -> str:
    m = re.search(r"^ARG BASE_IMAGE=(\S+)$", (REPO / "docker" / "Dockerfile").read_text(), re.M)
    assert m, "docker/Dockerfile has no 'ARG BASE_IMAGE=' line"
    return m.group(1)


def test_given_dockerfile_when_base_image_read_then_it_is_the_tables_release():
    assert dockerfile_base_image() == NEURON_STACK.base_image


@pytest.mark.parametrize("name", ["requirements-xla.txt", "constraints-xla.txt"])
def test_given_xla_environment_files_then_torch_and_torch_xla_are_the_tables(name):
    pins = pinned(REPO / name)
    for package, version in NEURON_STACK.pins().items():
        assert pins.get(package) == version, f"{name}: {package}=={pins.get(package)}, table says {version}"


def test_given_xla_constraints_then_training_requirements_are_pinned_at_the_same_versions():
    # .venv-xla runs the same training code: same transformers, h5py, tokenizers... as the image.
    training = pinned(REPO / "training" / "requirements.txt")
    xla = pinned(REPO / "constraints-xla.txt")
    assert {k: xla.get(k) for k in training} == training


def test_given_another_release_when_image_named_then_every_field_is_in_the_tag():
    stack = NeuronStack(
        neuron_sdk="2.99.0",
        torch="9.9.0",
        torch_xla="9.9.1",
        python="3.13",
        ubuntu="26.04",
        runtime_lib="9.9.9.0",
        driver_min="9.0.0.0",
        driver_below="10.0.0.0",
    )
    assert stack.base_image == (
        "public.ecr.aws/neuron/pytorch-training-neuronx:9.9.0-neuronx-py313-sdk2.99.0-ubuntu26.04"
    )
    assert stack.pins() == {"torch": "9.9.0", "torch-xla": "9.9.1"}
    # A Dockerfile pinned to another release must not pass.
    assert stack.base_image != dockerfile_base_image()


def test_given_the_table_then_it_is_the_last_pytorch_xla_training_release_and_its_runtime():
    # Neuron 2.29.1 DLC (aws-neuron/deep-learning-containers tag 2.29.1): runtime 2.31.24.0.
    assert NEURON_STACK.neuron_sdk == "2.29.1" and NEURON_STACK.runtime_lib == "2.31.24.0"
    assert NEURON_STACK.driver_range == ">= 2.27.4.0 and < 2.29.0.0"


@pytest.mark.parametrize(
    ("version", "parts"), [("2.31.24.0-0b044f4ce", (2, 31, 24, 0)), ("2.28.0.0\n", (2, 28, 0, 0))]
)
def test_given_package_versions_then_the_dotted_numbers_compare(version, parts):
    assert version_tuple(version) == parts


@pytest.mark.parametrize("bad", ["", "abc", "2.x.1"])
def test_given_a_non_version_then_value_error(bad):
    with pytest.raises(ValueError):
        version_tuple(bad)
