"""The image copy's function as synthesized, and the sizing it rests on."""

from __future__ import annotations

from tests.support import resources, synth_training
from trainium_eks.image_transfer import (
    COPY_MEMORY_MIB,
    COPY_TIMEOUT_MINUTES,
    TRAINING_IMAGE_GB,
    review_lines,
    transfer_minutes,
)

#: AWS Lambda developer guide, "Configure Lambda function memory": one vCPU at 1,769 MB.
ONE_VCPU_MB = 1769
#: Lambda's default /tmp (MB): what the copy needs, as it streams (trainium_eks/image_transfer.py).
DEFAULT_EPHEMERAL_MB = 512


def _copy_functions(template):
    return [
        r["Properties"]
        for r in resources(template, "AWS::Lambda::Function").values()
        if r["Properties"].get("Handler") == "bootstrap" and r["Properties"]["Runtime"] == "provided.al2023"
    ]


def test_given_the_training_stack_then_one_copy_function_with_a_vcpus_memory_and_15_minutes():
    (function,) = _copy_functions(synth_training())  # a singleton for both image copies
    assert function["MemorySize"] == COPY_MEMORY_MIB >= ONE_VCPU_MB
    assert function["Timeout"] == COPY_TIMEOUT_MINUTES * 60 == 900
    # No escape hatch: the default /tmp is enough for a streamed registry-to-registry copy.
    assert function.get("EphemeralStorage", {"Size": DEFAULT_EPHEMERAL_MB}) == {"Size": DEFAULT_EPHEMERAL_MB}
    copies = resources(synth_training(), "Custom::CDKECRDeployment")
    assert len(copies) == 2


def test_given_the_assumed_image_then_the_copy_fits_its_time_limit_with_margin():
    assert transfer_minutes() == TRAINING_IMAGE_GB / 2.5  # 15 GB in 6 min, AWS's slow reading
    assert transfer_minutes() * 1.5 < COPY_TIMEOUT_MINUTES


def test_given_the_review_then_it_names_the_size_the_copy_and_the_pull_per_node():
    text = "\n".join(review_lines())
    assert "~20 GB assumed" in text and "2,048 MiB function" in text and "~8 min pull per node" in text
