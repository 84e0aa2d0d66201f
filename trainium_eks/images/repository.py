"""ECR repository for the training images."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy, Token
from aws_cdk import aws_ecr as ecr
from constructs import Construct

from trainium_job import checks

from ..escape_hatch import l1

#: Most tagged images the lifecycle policy may be told to keep.
MAX_KEEP_IMAGES = 1000


def check_keep_images(count: int, *, field: str = "keep_images") -> None:
    """The number of tagged images to keep: a whole number from 1 to :data:`MAX_KEEP_IMAGES`."""
    if not Token.is_unresolved(count):
        checks.whole_number(field, count, minimum=1, maximum=MAX_KEEP_IMAGES)


class TrainingImageRepository(Construct):
    """A private ECR repository for the training container images.

    Defaults and why:
        * scan on push (basic scanning): every pushed image gets a CVE report.
        * immutable tags: a tag always names the same image, so a job spec (and its Neuron
          compile cache) is reproducible and a push can never silently change a running job's
          image. Push each build under a new tag (e.g. the git commit).
        * AES256 (ECR's server-side encryption): images hold code and public packages, no
          secrets; a customer-managed key would add a key to manage and KMS calls on every pull
          for no access control that the repository's IAM does not already give. The setting
          cannot be changed on an existing repository.
        * lifecycle: untagged images expire after ``untagged_expiry_days``; of the rest, the
          newest ``keep_images`` stay.
        * RETAIN and no emptying on delete: a stack delete keeps the images.

    Attributes:
        repository: the ``ecr.Repository``.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        repository_name: str,
        keep_images: int = 20,
        untagged_expiry_days: int = 7,
        removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
    ) -> None:
        """
        Args:
            repository_name: the repository's name (``trainium_job.naming.repository_name``
                builds the platform's).
            keep_images: tagged images kept, newest first, 1 to 1000. Default 20.
            untagged_expiry_days: days after which untagged images expire, 1 to 365. Default 7.
            removal_policy: what a stack delete does to the repository. Default
                ``RemovalPolicy.RETAIN``.
        """
        super().__init__(scope, id)
        check_keep_images(keep_images)
        checks.whole_number("untagged_expiry_days", untagged_expiry_days, minimum=1, maximum=365)
        self.repository = ecr.Repository(
            self,
            "Repository",
            repository_name=repository_name,
            image_scan_on_push=True,
            image_tag_mutability=ecr.TagMutability.IMMUTABLE,
            encryption=ecr.RepositoryEncryption.AES_256,
            removal_policy=removal_policy,
            empty_on_delete=False,
            lifecycle_rules=[
                ecr.LifecycleRule(
                    rule_priority=1,
                    tag_status=ecr.TagStatus.UNTAGGED,
                    max_image_age=Duration.days(untagged_expiry_days),
                    description=f"expire untagged images after {untagged_expiry_days} days",
                ),
                ecr.LifecycleRule(
                    rule_priority=2,
                    tag_status=ecr.TagStatus.ANY,
                    max_image_count=keep_images,
                    description=f"keep the newest {keep_images} images",
                ),
            ],
        )
        # aws-cdk-lib leaves the AES256 default implicit; state it so the template shows it.
        l1(self.repository).add_property_override("EncryptionConfiguration", {"EncryptionType": "AES256"})
