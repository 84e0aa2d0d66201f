"""How the training image reaches the nodes, and how long that takes: the copy into the
platform's ECR repository (cdk-ecr-deployment's Lambda function) and each node's pull.

The copy, from cdk-ecr-deployment 4.2.76's source: a Go function (``lambda-src/main.go``
``copyImage``) calling containers/image ``copy.Image`` registry to registry (both ``docker://``)
with a SystemContext that sets only credentials, user agent and architecture
(``lambda-src/utils.go`` ``NewSystemContext``). containers/image's registry destination uploads
each layer as one streamed PATCH from the source's response, computing the digest on the fly
(``docker/docker_image_dest.go`` ``PutBlobWithOptions``); it spools to disk only with
``DockerRegistryPushPrecomputeDigests``, which the function does not set. So neither memory nor
``/tmp`` grows with the image: the function keeps Lambda's default 512 MB ``/tmp``, and its
memory is sized for CPU, which Lambda allots in proportion ("At 1,769 MB, a function has the
equivalent of one vCPU", AWS Lambda developer guide, "Configure Lambda function memory"): the
SHA-256 of every layer and TLS on both sides get a whole vCPU (512 MB, the library's default,
gives 0.29). What bounds the copy is its 15-minute limit (the library's ``timeout``).

Sizes and rates: no published size of the Neuron training DLC was found (its README and the
ECR gallery do not state one). AWS's figure for Deep Learning Containers is "Standard Docker
image pulls of 15-20 GB can take 4-6 minutes per instance" (AWS Machine Learning Blog, "Reducing
container cold start times using SOCI index on DLAMI and DLC", 2026): the image is taken as
:data:`TRAINING_IMAGE_GB` (the upper end) and moved at :data:`PULL_GB_PER_MINUTE` (the slow
reading: 15 GB in 6 minutes), by the copy and by every node's pull alike. ``aws ecr
describe-images --query 'imageDetails[].imageSizeInBytes'`` shows the real (compressed) size
once the image is pushed.
"""

from __future__ import annotations

from typing import Final

#: The training image's size (GB) assumed for the copy and the pulls (see the module docstring).
TRAINING_IMAGE_GB: Final = 20.0
#: Transfer rate assumed for one copy or one node's pull (GB per minute).
PULL_GB_PER_MINUTE: Final = 15.0 / 6.0
#: The copy function's memory: one whole vCPU's worth (1,769 MB), rounded up to a power of two.
COPY_MEMORY_MIB: Final = 2048
#: The copy function's time limit (cdk-ecr-deployment 4.2.76: ``Duration.minutes(15)``, Lambda's most).
COPY_TIMEOUT_MINUTES: Final = 15


def transfer_minutes(size_gb: float = TRAINING_IMAGE_GB) -> float:
    """Minutes one copy or one node's pull of a ``size_gb`` image takes at the assumed rate."""
    return size_gb / PULL_GB_PER_MINUTE


def review_lines() -> list[str]:
    """The synth review's lines on the image."""
    minutes = transfer_minutes()
    return [
        f"  image:        ~{TRAINING_IMAGE_GB:.0f} GB assumed (no published size; AWS: DLC pulls of 15-20 GB "
        "take 4-6 min)",
        f"                copied into ECR in ~{minutes:.0f} min by a {COPY_MEMORY_MIB:,} MiB function "
        f"({COPY_TIMEOUT_MINUTES} min limit); ~{minutes:.0f} min pull per node",
    ]
