"""The image build's figures, as the review states them."""

from __future__ import annotations

from trainium_eks.images import image_build
from trainium_eks.images.training_image import build_context, context_bytes


def test_given_the_build_context_then_the_deploy_uploads_kilobytes_and_the_review_says_so():
    uploaded = context_bytes(build_context())
    assert 10_000 < uploaded < 1_000_000  # the zipped context: code and Dockerfiles, no image
    lines = image_build.review_lines(context_bytes=uploaded)
    assert f"uploads {uploaded / 1024:,.0f} KiB, no Docker needed" in lines[0]
    assert "CodeBuild large" in lines[0] and f"limit {image_build.BUILD_TIMEOUT_MINUTES} min" in lines[0]
    assert "~8 min pull per node" in lines[1]


def test_given_the_assumed_rates_then_the_build_fits_its_limit():
    assert image_build.pull_minutes(15.0) == 6.0  # AWS: 15-20 GB in 4-6 min, the slow reading
    assert image_build.BUILD_MINUTES_ESTIMATE < image_build.BUILD_TIMEOUT_MINUTES


def test_given_a_base_image_then_the_digest_command_asks_the_registry_for_its_digest():
    command = image_build.base_digest_command("public.ecr.aws/x/y:1")
    assert (
        command == "$(docker buildx imagetools inspect public.ecr.aws/x/y:1 --format '{{.Manifest.Digest}}')"
    )
