"""The synth review's storage lines: what the S3 gateway endpoint keeps off the NAT, what FSx
exports to S3 and what it then stops backing up, and where the model bucket is."""

from __future__ import annotations

from trainium_eks.config import config_from_context
from trainium_eks.report.review import model_bucket_lines, platform_review

EXISTING_VPC = {
    "existing_vpc_id": "vpc-0123456789abcdef0",
    "existing_private_subnet_ids": "subnet-0aaaaaaaaaaaaaaaa,subnet-0bbbbbbbbbbbbbbbb",
}


def _review(**context: str) -> list[str]:
    return platform_review(config_from_context(context)).splitlines()


def _not_counted(**context: str) -> str:
    (line,) = [line for line in _review(**context) if line.lstrip().startswith("not counted: ")]
    return line


def test_given_the_created_vpc_then_the_nat_data_line_says_s3_in_the_region_takes_the_endpoint():
    line = _not_counted()
    # Still not counted: the NAT's charge per GB of what does cross it.
    assert "not counted: NAT data $0.045/GB (S3 in us-west-2, ECR image layers included, " in line
    assert "takes the free S3 gateway endpoint instead)" in line
    assert "the existing VPC's NAT" not in line
    assert "model bucket storage" in line


def test_given_an_existing_vpc_then_the_line_says_the_platform_adds_no_endpoint_to_it():
    line = _not_counted(**EXISTING_VPC)
    assert "NAT data $0.045/GB, " in line and "gateway endpoint instead" not in line
    assert line.endswith(
        "the existing VPC's NAT (the platform adds no S3 gateway endpoint to that VPC: without one of its "
        "own, S3 traffic and ECR image layers cross its NAT)"
    )


def test_given_no_s3_link_then_the_fsx_line_stands_alone():
    review = _review()
    fsx = review.index(next(line for line in review if line.startswith("  FSx:")))
    assert review[fsx + 1].startswith("  monitoring:")


def test_given_an_export_uri_then_the_review_names_the_command_for_files_already_there_and_lost_backups():
    review = _review(fsx_s3_export_uri="s3://my-results/runs")
    fsx = review.index(next(line for line in review if line.startswith("  FSx:")))
    assert review[fsx + 1 : fsx + 3] == [
        "                /runs exported to s3://my-results/runs/ as files are created, changed or deleted; "
        "files already there: the FsxExportCommand output of trn-bert-platform (one EXPORT_TO_REPOSITORY task)",
        "                linked to S3: FSx backs up no file system linked to an S3 data repository "
        '(FSx for Lustre User Guide, "Working with backups")',
    ]


def test_given_an_import_uri_only_then_the_review_says_the_backups_are_lost_too():
    review = _review(fsx_s3_import_uri="s3://my-data/bert/")
    assert any(line.strip().startswith("linked to S3: FSx backs up no file system") for line in review)
    assert not any("FsxExportCommand" in line for line in review)


def test_given_a_prefix_then_the_model_bucket_line_names_its_stack_output():
    (line,) = model_bucket_lines(config_from_context({"name_prefix": "exp"}))
    assert line.startswith(
        "  model bucket: s3://<bucket>/<run>/model/ (<bucket>: the WorkloadModelBucketName output of exp-platform)"
    )
    assert "SSE-S3, versioned (older versions kept 90 d), TLS only, no public access" in line
    assert line in _review(name_prefix="exp")
