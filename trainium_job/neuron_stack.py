"""The one table of the PyTorch/XLA stack: the training image's, ``.venv-xla``'s, and the Neuron
driver range the nodes must run for it.

Torch-free (stdlib only): the CDK tests, the image tests, the XLA tests and the in-pod driver
check (:mod:`training.node.driver_check`) all read it. ``docker/Dockerfile`` (its ``BASE_IMAGE``),
``requirements-xla.txt`` and ``constraints-xla.txt`` must agree with it
(``tests/training/test_neuron_stack.py``); the Trainium nodegroup's AMI release is chosen from
``trainium_eks.versions.NEURON_AMI_RELEASES`` by :meth:`NeuronStack.supports_driver`.

Sources:
* PyTorch/XLA training ends with Neuron 2.29.x: "Neuron no longer supports PyTorch/XLA for
  training starting with Neuron 2.30"; torch-neuronx 2.9 is built on torch-xla 2.9
  ("Introducing PyTorch 2.9 Support" points to the torch-xla v2.9.0 release), and torch-xla
  2.9.0 on PyPI requires torch 2.9.0 exactly.
* The image: the Neuron 2.29.1 row of aws-neuron/deep-learning-containers' README,
  ``pytorch-training-neuronx:2.9.0-neuronx-py312-sdk2.29.1-ubuntu24.04`` (tag 2.29.1, commit
  1264130, 2026-05-01). 2.29.1 over 2.29.0: only neuronx-cc (2.24.5133.0 -> 2.24.8799.0); the
  runtime is the same. Its ``pytorch/training/2.9.0/Dockerfile.neuronx`` installs
  ``aws-neuronx-runtime-lib=2.31.24.0-0b044f4ce`` (apt, the ``prod`` stage).
* The driver range (aws-neuron/aws-neuron-sdk ``release-notes/components/runtime.rst``): runtime
  2.31.24.0 shipped with Neuron 2.29.0 next to driver 2.27.4.0; "The driver remains backwards
  compatible with older versions of Neuron Runtime, but newer versions of the Runtime might rely
  on the functionality that is only provided by a newer driver" (``nrt-troubleshoot.rst``), so
  2.27.4.0 is the floor; Neuron 2.31.0's known issue "Neuron Driver 2.29 requires Neuron Runtime
  Library 2.33 or later ... will cause ``nrt_init()`` to fail" makes 2.29 the ceiling (whether
  drivers 2.30+ lift that requirement is not stated: they are outside the range too).
"""

from __future__ import annotations

from dataclasses import dataclass


def version_tuple(version: str) -> tuple[int, ...]:
    """``"2.31.24.0-0b044f4ce"`` -> ``(2, 31, 24, 0)``: the dotted numbers before any build suffix."""
    head = version.strip().split("-", 1)[0].split("+", 1)[0]
    parts = head.split(".")
    if not head or not all(p.isdigit() for p in parts):
        raise ValueError(f"not a dotted version: {version!r}")
    return tuple(int(p) for p in parts)


@dataclass(frozen=True)
class NeuronStack:
    """One Neuron SDK release's PyTorch/XLA training stack."""

    neuron_sdk: str  # Neuron SDK release
    torch: str  # torch in the image and in .venv-xla
    torch_xla: str  # torch-xla in the image and in .venv-xla
    python: str  # the image's Python (major.minor)
    ubuntu: str  # the image's Ubuntu release
    runtime_lib: str  # aws-neuronx-runtime-lib in the image (its .deb version without the build hash)
    driver_min: str  # oldest Neuron driver (aws-neuronx-dkms) the runtime works with
    driver_below: str  # first driver version it does not work with
    image_repository: str = "public.ecr.aws/neuron/pytorch-training-neuronx"

    @property
    def base_image(self) -> str:
        """The Neuron PyTorch training DLC of this release (``docker/Dockerfile``'s default)."""
        py = self.python.replace(".", "")
        return f"{self.image_repository}:{self.torch}-neuronx-py{py}-sdk{self.neuron_sdk}-ubuntu{self.ubuntu}"

    def pins(self) -> dict[str, str]:
        """Package -> version that ``requirements-xla.txt`` and ``constraints-xla.txt`` pin."""
        return {"torch": self.torch, "torch-xla": self.torch_xla}

    @property
    def driver_range(self) -> str:
        """``>= 2.27.4.0 and < 2.29.0.0``."""
        return f">= {self.driver_min} and < {self.driver_below}"

    def supports_driver(self, driver: str) -> bool:
        """Whether the node's Neuron driver ``driver`` runs this stack's runtime."""
        return version_tuple(self.driver_min) <= version_tuple(driver) < version_tuple(self.driver_below)

    def is_runtime(self, runtime: str) -> bool:
        """Whether ``runtime`` (e.g. ``2.31.24.0-0b044f4ce``) is this stack's runtime library."""
        return version_tuple(runtime) == version_tuple(self.runtime_lib)


NEURON_STACK = NeuronStack(
    neuron_sdk="2.29.1",
    torch="2.9.0",
    torch_xla="2.9.0",
    python="3.12",
    ubuntu="24.04",
    runtime_lib="2.31.24.0",
    driver_min="2.27.4.0",
    driver_below="2.29.0.0",
)
