"""How the images are built and reach the nodes: in the account's region at deploy, by cdklabs'
deploy-time-build, and pulled by each node. Facts and figures only (no constructs).

The build (``cdklabs-deploy-time-build`` 0.1.14, ``lib/container-image-build.js``): ``cdk deploy``
uploads the build context as an S3 file asset (a zip of :func:`trainium_eks.images.training_image.build_context`,
about 160 KB), a custom resource starts a CodeBuild build of it (``aws/codebuild/standard:7.0``,
privileged, ``docker buildx build`` of the zip, then ``docker push`` to the platform's repository),
and the build itself answers CloudFormation from its ``post_build`` phase: SUCCESS with the tag,
or FAILED with a link to the build's log stream. The deployer's machine needs no Docker and moves
no image. What the library leaves at its defaults, and this platform sets
(:class:`trainium_eks.images.training_image.TrainingImages`):

* compute: ``BUILD_GENERAL1_SMALL`` (3 GB memory, 64 GB disk) cannot hold the Neuron DLC's layers
  twice (pulled, then exported into the Docker store for the push); ``LARGE`` has 15 GB and 128 GB
  (AWS CodeBuild User Guide, "Build environment compute modes and types").
* time: the custom resource waits at most 3,600 s (``ServiceTimeout``; aws-cdk-lib
  ``CustomResource.serviceTimeout``: "between 1 second and 3600 seconds"); the build's queue and
  run limits stay under it with a margin for the function that starts it. A build stopped before
  ``post_build`` (at a limit, by hand, or by a CodeBuild fault) would leave nothing to answer:
  :mod:`trainium_eks.images.build_responder` answers FAILED for it with its last log lines (a build whose
  ``post_build`` succeeded has answered, and is left alone).
* logs: an encrypted log group with retention, instead of CodeBuild's default group (none, kept).
* permissions: a boundary on the build role (:func:`build_boundary_statements`).

Sizes and rates: no published size of the Neuron training DLC was found (its README and the ECR
gallery state none; the DLC's Dockerfile installs PyPI's CUDA build of torch, about 3.9 GB of
wheels, and reinstalls it in a later layer). AWS's figure for Deep Learning Containers is
"Standard Docker image pulls of 15-20 GB can take 4-6 minutes per instance" (AWS Machine
Learning Blog, "Reducing container cold start times using SOCI index on DLAMI and DLC"): the image
is taken as :data:`TRAINING_IMAGE_GB` (the upper end) at :data:`PULL_GB_PER_MINUTE` (15 GB in 6
minutes). ``aws ecr describe-images --query 'imageDetails[].imageSizeInBytes'`` gives the real
(compressed) size once pushed.
"""

from __future__ import annotations

import copy
from typing import Any, Final

#: The training image's size (GB) assumed for the build's push and the nodes' pulls.
TRAINING_IMAGE_GB: Final = 20.0
#: Transfer rate assumed for a pull or a push inside the region (GB per minute).
PULL_GB_PER_MINUTE: Final = 15.0 / 6.0
#: CodeBuild compute type of the image builds (see the module docstring).
BUILD_COMPUTE_TYPE: Final = "BUILD_GENERAL1_LARGE"
#: The custom resource's wait: CloudFormation's most.
CUSTOM_RESOURCE_TIMEOUT_S: Final = 3600
#: The build's queue limit (CodeBuild's least) and run limit (minutes): with the 5 minutes of the
#: function that starts the build, 55, under the custom resource's 60.
BUILD_QUEUED_TIMEOUT_MINUTES: Final = 5
BUILD_TIMEOUT_MINUTES: Final = 45
#: What the build does in its limit: pull the base image, install the pins, push.
BUILD_MINUTES_ESTIMATE: Final = 2 * TRAINING_IMAGE_GB / PULL_GB_PER_MINUTE + 5
#: The base image's digest, resolved in the build and recorded as the image's OCI label
#: ``org.opencontainers.image.base.digest`` (docker/Dockerfile ``ARG BASE_DIGEST``). The library
#: puts ``--build-arg KEY=VALUE`` into the build command unquoted and the buildspec runs it with
#: ``eval "$buildCommand"`` (container-image-build.js ``getDockerBuildCommand``, buildspec ``build``
#: phase; tests/contracts/test_deploy_time_build.py reads both in the installed package), so the
#: command substitution runs in the build, where the registry is reachable.
BASE_DIGEST_ARG: Final = "BASE_DIGEST"


def base_digest_command(base_image: str) -> str:
    """The shell that prints ``base_image``'s digest in the build (docker buildx is on the build image:
    the library's buildspec runs ``docker buildx``). ``docker buildx imagetools inspect --format``
    takes a Go template over the result, whose ``.Manifest.Digest`` is the reference's digest
    (Docker docs, "docker buildx imagetools inspect", ``--format``)."""
    return f"$(docker buildx imagetools inspect {base_image} --format '{{{{.Manifest.Digest}}}}')"


#: The build's first command: is the tag already in the repository? (``ecr:DescribeImages``, which
#: the build role has on the platform's repository; ``aws ecr describe-images --repository-name
#: --image-ids imageTag=...`` per the AWS CLI reference, which exits 254 when the service answers
#: an error such as ImageNotFoundException: AWS CLI user guide, "Command line return codes".)
#: ``repositoryUri``, ``repositoryRegion`` and ``imageTag`` are the variables the library's function
#: passes to each build.
EXISTS_CHECK = (
    'if aws ecr describe-images --region "$repositoryRegion" --repository-name "${repositoryUri#*/}" '
    '--image-ids imageTag="$imageTag" >/dev/null 2>&1; then IMAGE_EXISTS=1; '
    'echo "$repositoryUri:$imageTag is in the repository: not built again"; else IMAGE_EXISTS=; fi'
)


def skip_existing_tag(buildspec: dict[str, Any]) -> dict[str, Any]:
    """The library's buildspec with its build phase skipped when the tag is already pushed.

    The repository's tags are immutable and a rebuild is not byte-identical (pip's layers carry
    times), so pushing a tag again fails: a CloudFormation rollback, which re-sends the previous
    build, and a retry of a build that pushed and then failed to answer, would fail. With the tag
    there, the build pushes nothing and ``post_build`` answers SUCCESS with the tag: the same
    context is the same image. The commands run in one shell (buildspec version 0.2), so the
    check's variable guards each of the library's commands.
    """
    spec = copy.deepcopy(buildspec)
    build = spec["phases"]["build"]
    build["commands"] = [EXISTS_CHECK] + [
        f'[ -n "$IMAGE_EXISTS" ] || {{ {command}; }}' for command in build["commands"]
    ]
    return spec


def pull_minutes(size_gb: float = TRAINING_IMAGE_GB) -> float:
    """Minutes one node's pull of a ``size_gb`` image takes at the assumed rate."""
    return size_gb / PULL_GB_PER_MINUTE


def review_lines(*, context_bytes: int) -> list[str]:
    """The synth review's lines on the images."""
    return [
        f"  image:        built in the region at deploy (CodeBuild {BUILD_COMPUTE_TYPE.split('_')[-1].lower()}, "
        f"~{BUILD_MINUTES_ESTIMATE:.0f} min, limit {BUILD_TIMEOUT_MINUTES} min); "
        f"the deploy uploads {context_bytes / 1024:,.0f} KiB, no Docker needed",
        f"                ~{TRAINING_IMAGE_GB:.0f} GB assumed (no published size; AWS: DLC pulls of 15-20 GB "
        f"take 4-6 min): ~{pull_minutes():.0f} min pull per node",
    ]
