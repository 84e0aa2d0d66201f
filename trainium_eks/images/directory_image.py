"""An image of your own: a folder with its Dockerfile, built in the account's region at deploy into
an ECR repository, tagged by the folder's content (no Docker where you deploy), through the same
CodeBuild path as the library's own images (:mod:`trainium_eks.images.training_image`).

The build gets ``BASE_IMAGE``, the Neuron PyTorch training image the library pins
(``trainium_job.neuron_stack``: its runtime matches the driver of the nodes the platform pins),
so a Dockerfile that starts ``ARG BASE_IMAGE`` / ``FROM ${BASE_IMAGE}`` builds on it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from aws_cdk import aws_ecr as ecr
from constructs import Construct

from trainium_job.errors import ConfigError
from trainium_job.neuron_stack import NEURON_STACK

from .training_image import harden_builds, image_build_construct

#: The build argument the Neuron base image arrives in.
BASE_IMAGE_ARG: Final = "BASE_IMAGE"
#: Folders a context digest skips (they are not what the image is built from).
_SKIPPED: Final = {".git", "__pycache__", ".venv", "node_modules", "cdk.out"}


def directory_digest(directory: Path, build_args: Mapping[str, str]) -> str:
    """SHA-256 of every file's relative path and bytes under ``directory``, and the build arguments."""
    digest = hashlib.sha256()
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        rel = path.relative_to(directory)
        if _SKIPPED & set(rel.parts):
            continue
        digest.update(rel.as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    for key, value in sorted(build_args.items()):
        digest.update(f"{key}={value}\0".encode())
    return digest.hexdigest()


class DirectoryImage(Construct):
    """``directory`` built with its ``dockerfile`` into ``repository`` as ``<name>-<16 hex>``.

    Attributes: image (its URI, a token for the repository), tag (plain: stable job names),
    builds (the build constructs: apply what uses the image after them), project.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        directory: str | Path,
        repository: ecr.IRepository,
        dockerfile: str = "Dockerfile",
        name: str = "job",
        build_args: Mapping[str, str] | None = None,
    ) -> None:
        """
        Args:
            directory: the build context (a folder of your app).
            repository: the ECR repository the image is pushed to (the platform's).
            dockerfile: the Dockerfile, relative to ``directory``. Default "Dockerfile".
            name: the tag's prefix. Default "job".
            build_args: more ``--build-arg`` values; ``BASE_IMAGE`` is the library's pinned Neuron
                image unless given. Default none.
        """
        super().__init__(scope, id)
        folder = Path(directory)
        if not folder.is_dir():
            raise ConfigError("directory", str(directory), "give a folder that holds your Dockerfile")
        if not (folder / dockerfile).is_file():
            raise ConfigError(
                "dockerfile", dockerfile, f"no such file in {folder}: give the Dockerfile's name"
            )
        args = {BASE_IMAGE_ARG: NEURON_STACK.base_image, **dict(build_args or {})}
        self.tag = f"{name}-{directory_digest(folder, args)[:16]}"
        build = image_build_construct(
            self, "Build", directory=str(folder), dockerfile=dockerfile, repository=repository,
            tag=self.tag, build_args=args,
        )  # fmt: skip
        self.builds = [build]
        self.project = harden_builds(self, repository, self.builds)
        self.image = f"{repository.repository_uri}:{self.tag}"
