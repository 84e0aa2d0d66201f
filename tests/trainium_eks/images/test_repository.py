"""ECR repository for training images: scanning, immutability, encryption, lifecycle, RETAIN."""

import json

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template

from tests.support import resources
from trainium_eks.images.repository import TrainingImageRepository
from trainium_job.errors import ConfigError


def _repository(template_json):
    (repo,) = resources(template_json, "AWS::ECR::Repository").values()
    return repo


def test_given_default_config_then_images_are_scanned_immutable_and_encrypted(platform_json):
    props = _repository(platform_json)["Properties"]
    assert props["RepositoryName"] == "trn-bert/training"
    assert props["ImageScanningConfiguration"] == {"ScanOnPush": True}
    assert props["ImageTagMutability"] == "IMMUTABLE"
    assert props["EncryptionConfiguration"] == {"EncryptionType": "AES256"}


def test_given_default_config_then_a_stack_delete_keeps_the_images(platform_json):
    repo = _repository(platform_json)
    assert (repo["DeletionPolicy"], repo["UpdateReplacePolicy"]) == ("Retain", "Retain")
    assert repo["Properties"]["EmptyOnDelete"] is False
    # No auto-delete custom resource either.
    assert not [r for r in platform_json["Resources"].values() if r["Type"] == "Custom::ECRAutoDeleteImages"]


def test_given_default_config_then_untagged_expire_first_and_the_newest_20_stay(platform_json):
    policy = json.loads(_repository(platform_json)["Properties"]["LifecyclePolicy"]["LifecyclePolicyText"])
    assert [(r["rulePriority"], r["selection"]) for r in policy["rules"]] == [
        (
            1,
            {"tagStatus": "untagged", "countType": "sinceImagePushed", "countNumber": 7, "countUnit": "days"},
        ),
        (2, {"tagStatus": "any", "countType": "imageCountMoreThan", "countNumber": 20}),
    ]
    assert all(r["action"] == {"type": "expire"} for r in policy["rules"])


def _small_stack(**props):
    stack = cdk.Stack(cdk.App(), "Ecr")
    TrainingImageRepository(stack, "Registry", repository_name="x/training", **props)
    return Template.from_stack(stack).to_json()


def test_given_other_retention_then_the_lifecycle_follows():
    policy = json.loads(
        _repository(_small_stack(keep_images=5, untagged_expiry_days=1))["Properties"]["LifecyclePolicy"][
            "LifecyclePolicyText"
        ]
    )
    assert [r["selection"]["countNumber"] for r in policy["rules"]] == [1, 5]


@pytest.mark.parametrize("props", [{"keep_images": 0}, {"keep_images": 1001}, {"untagged_expiry_days": 0}])
def test_given_out_of_range_retention_then_construction_fails(props):
    with pytest.raises(ConfigError, match="use 1 to") as err:
        _small_stack(**props)
    assert err.value.field_name == next(iter(props))
