"""The one table of the PyTorch/XLA stack: the training image's and ``.venv-xla``'s.

Torch-free (stdlib only): the CDK tests, the image tests and the XLA tests all read it.
``docker/Dockerfile`` (its ``BASE_IMAGE``), ``requirements-xla.txt`` and ``constraints-xla.txt``
must agree with it; ``tests/training/test_neuron_stack.py`` fails when they do not, and
``tests/xla/test_stack.py`` checks the installed torch / torch-xla against it.

Sources:
* Neuron 2.28.0 (26 Feb 2026) ships PyTorch NeuronX for PyTorch 2.9 ("Component Release Notes
  for Neuron PyTorch Framework", v2.28.1 docs); PyTorch 2.9 is the last line on PyTorch/XLA
  ("Neuron no longer supports PyTorch/XLA for training starting with Neuron 2.30").
* torch-neuronx 2.9 is built on torch-xla 2.9 ("Introducing PyTorch 2.9 Support" points to the
  torch-xla v2.9.0 release); torch-xla 2.9.0 on PyPI requires torch 2.9.0 exactly.
* The image tag is the Neuron 2.28.0 row of AWS's deep-learning-containers list.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NeuronStack:
    """One Neuron SDK release's PyTorch/XLA training stack."""

    neuron_sdk: str  # Neuron SDK release
    torch: str  # torch in the image and in .venv-xla
    torch_xla: str  # torch-xla in the image and in .venv-xla
    python: str  # the image's Python (major.minor)
    ubuntu: str  # the image's Ubuntu release
    image_repository: str = "public.ecr.aws/neuron/pytorch-training-neuronx"

    @property
    def base_image(self) -> str:
        """The Neuron PyTorch training DLC of this release (``docker/Dockerfile``'s default)."""
        py = self.python.replace(".", "")
        return f"{self.image_repository}:{self.torch}-neuronx-py{py}-sdk{self.neuron_sdk}-ubuntu{self.ubuntu}"

    def pins(self) -> dict[str, str]:
        """Package -> version that ``requirements-xla.txt`` and ``constraints-xla.txt`` pin."""
        return {"torch": self.torch, "torch-xla": self.torch_xla}


NEURON_STACK = NeuronStack(
    neuron_sdk="2.28.0", torch="2.9.0", torch_xla="2.9.0", python="3.12", ubuntu="24.04"
)
