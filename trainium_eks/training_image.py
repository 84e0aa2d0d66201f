"""The training and TensorBoard images: built from ``docker/`` at deploy, copied into the platform's ECR.

The build context is assembled at synth from files that ship inside the installed packages
(``trainium_eks/_docker`` -> ``docker/``, the ``training`` package and the job contract
``trainium_job`` it imports), so the constructs work
the same from this repository and when ``trainium-eks`` is pip-installed into another app. The
assembled directory is named after a hash of its contents: synth stays deterministic and
offline (nothing is built or pulled until ``cdk deploy``).

The CDK builds each image into its bootstrap asset repository; ``cdk-ecr-deployment`` (a
well-kept construct library, not a hand-written copy function) then copies it into the
platform's repository under the asset's content hash as tag, so a changed image is a new tag.
Its function streams layers (no disk) and gets the memory of one vCPU: see
:mod:`trainium_eks.image_transfer`. The copy stays, rather than pods pulling the asset
repository: that repository is the CDK bootstrap's, shared by every app of the account and
region, without the platform repository's lifecycle rules, and ``cdk gc`` may delete its images.

The copy function's role carries a permissions boundary (:func:`copy_boundary_statements`):
cdk-ecr-deployment 4.2.76 adds ECR read/push and ``s3:GetObject`` on ``*`` to whatever role it
runs with, and a boundary caps what that role can do whatever the library grants: read the
asset repository, push only to the platform's repository, no S3 (an image copy reads none).
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path

from aws_cdk import Fn
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_iam as iam
from cdk_ecr_deployment import DockerImageName, ECRDeployment
from constructs import Construct

import training
import trainium_job

from .image_transfer import COPY_MEMORY_MIB

DOCKER_DIR = Path(__file__).resolve().parent / "_docker"
TRAINING_DIR = Path(training.__file__).resolve().parent
#: The job contract: the training code imports its launch helpers (``trainium_job.launch``).
CONTRACT_DIR = Path(trainium_job.__file__).resolve().parent
DOCKERFILES = ("Dockerfile", "tensorboard.Dockerfile")


def _context_files() -> dict[str, Path]:
    """Relative path in the build context -> source file."""
    files = {name: DOCKER_DIR / name for name in (*DOCKERFILES, ".dockerignore")}
    for package in (TRAINING_DIR, CONTRACT_DIR):
        for path in sorted(package.rglob("*")):
            rel = path.relative_to(package)
            if path.is_file() and "__pycache__" not in rel.parts and path.suffix in (".py", ".json", ".txt"):
                files[f"{package.name}/{rel.as_posix()}"] = path
    missing = [str(src) for src in files.values() if not src.is_file()]
    if missing:
        raise FileNotFoundError(f"training image build context incomplete, missing: {', '.join(missing)}")
    return files


def build_context(root: Path | None = None) -> Path:
    """Assemble the build context; the same inputs always give the same directory and bytes."""
    files = _context_files()
    digest = hashlib.sha256()
    for rel, src in sorted(files.items()):
        digest.update(rel.encode() + b"\0" + src.read_bytes() + b"\0")
    target = (root or Path(tempfile.gettempdir())) / f"trainium-eks-image-{digest.hexdigest()[:16]}"
    if not (target / ".complete").is_file():
        staging = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
        for rel, src in files.items():
            dest = staging / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dest)
        (staging / ".complete").write_text("")
        try:
            staging.rename(target)
        except OSError:  # another synth got there first with the same contents
            shutil.rmtree(staging, ignore_errors=True)
    return target


#: ECR actions the copy needs on the source (read) and the destination (push) repositories.
ECR_READ_ACTIONS = (
    "ecr:BatchCheckLayerAvailability",
    "ecr:GetDownloadUrlForLayer",
    "ecr:BatchGetImage",
    "ecr:DescribeImages",
    "ecr:DescribeRepositories",
    "ecr:ListImages",
)
ECR_PUSH_ACTIONS = (
    "ecr:BatchCheckLayerAvailability",
    "ecr:InitiateLayerUpload",
    "ecr:UploadLayerPart",
    "ecr:CompleteLayerUpload",
    "ecr:PutImage",
    "ecr:DescribeImages",
    "ecr:DescribeRepositories",
)


def copy_boundary_statements(
    *, source_repository_arn: str, dest_repository_arn: str
) -> list[iam.PolicyStatement]:
    """The most the image-copy role may do: its boundary's statements."""
    stack_arn = "arn:${AWS::Partition}:logs:${AWS::Region}:${AWS::AccountId}"
    return [
        # GetAuthorizationToken has no resource-level permissions (Service Authorization Reference).
        iam.PolicyStatement(actions=["ecr:GetAuthorizationToken"], resources=["*"]),
        iam.PolicyStatement(actions=list(ECR_READ_ACTIONS), resources=[source_repository_arn]),
        iam.PolicyStatement(actions=list(ECR_PUSH_ACTIONS), resources=[dest_repository_arn]),
        # What AWSLambdaBasicExecutionRole grants, limited to Lambda's own log groups.
        iam.PolicyStatement(
            actions=["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents"],
            resources=[Fn.sub(f"{stack_arn}:log-group:/aws/lambda/*")],
        ),
    ]


class TrainingImages(Construct):
    """Both images, in ``repository`` as ``training-<hash>`` and ``tensorboard-<hash>``.

    Attributes:
        training_image / tensorboard_image: image URIs in the platform repository (tokens).
        training_tag / tensorboard_tag: the content-hash tags (plain strings: stable job names).
        copies: the ECRDeployment constructs (apply jobs after them).
    """

    def __init__(self, scope: Construct, id: str, *, repository: ecr.IRepository) -> None:
        """
        Args:
            repository: the ECR repository the images are copied into.
        """
        super().__init__(scope, id)
        context = str(build_context())
        self.copies: list[ECRDeployment] = []
        self.copy_role: iam.Role | None = None
        uris: dict[str, str] = {}
        tags: dict[str, str] = {}
        for name, dockerfile in (("training", "Dockerfile"), ("tensorboard", "tensorboard.Dockerfile")):
            asset = ecr_assets.DockerImageAsset(
                self,
                f"{name.title()}Asset",
                directory=context,
                file=dockerfile,
                platform=ecr_assets.Platform.LINUX_AMD64,
            )
            tags[name] = f"{name}-{asset.asset_hash[:16]}"
            uris[name] = f"{repository.repository_uri}:{tags[name]}"
            if self.copy_role is None:
                self.copy_role = self._copy_role(asset.repository.repository_arn, repository.repository_arn)
            self.copies.append(
                ECRDeployment(
                    self,
                    f"{name.title()}Copy",
                    src=DockerImageName(asset.image_uri),
                    dest=DockerImageName(uris[name]),
                    role=self.copy_role,
                    # Memory buys CPU for a streamed copy (trainium_eks.image_transfer).
                    memory_limit=COPY_MEMORY_MIB,
                )
            )
        self.training_image, self.tensorboard_image = uris["training"], uris["tensorboard"]
        self.training_tag, self.tensorboard_tag = tags["training"], tags["tensorboard"]

    def _copy_role(self, source_arn: str, dest_arn: str) -> iam.Role:
        boundary = iam.ManagedPolicy(
            self,
            "CopyBoundary",
            description="Boundary of the image-copy role: read the asset repository, push to the platform's",
            statements=copy_boundary_statements(
                source_repository_arn=source_arn, dest_repository_arn=dest_arn
            ),
        )
        return iam.Role(
            self,
            "CopyRole",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            managed_policies=[
                iam.ManagedPolicy.from_aws_managed_policy_name("service-role/AWSLambdaBasicExecutionRole")
            ],
            permissions_boundary=boundary,
            description="cdk-ecr-deployment's copy function (bounded: see CopyBoundary)",
        )
