"""The training and TensorBoard images: built in the account's region at deploy, straight into the
platform's ECR repository, tagged by the content of their build context.

The build context is assembled at synth from files that ship inside the installed packages
(``trainium_eks/_docker`` -> ``docker/``, the ``training`` package and the job contract
``trainium_job`` it imports), so the constructs work the same from this repository and when the
wheel is installed into another app. The assembled directory is named after a hash of its
contents: synth stays deterministic and offline.

cdklabs' deploy-time-build (``ContainerImageBuild``, a well-kept construct library rather than a
hand-written CodeBuild trigger) uploads that context as a small S3 asset and builds it with
CodeBuild in the region: the deployer needs no Docker and moves no image, and the image is pushed
once, into the platform's repository. Settings the library leaves at defaults unfit for a
multi-GB Neuron image, and why each is set: :mod:`trainium_eks.images.image_build`.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import shutil
import tempfile
import zipfile
from pathlib import Path

from aws_cdk import ArnFormat, CfnResource, Duration, RemovalPolicy, Stack
from aws_cdk import aws_codebuild as codebuild
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3_assets as s3_assets
from cdklabs.deploy_time_build import ContainerImageBuild
from constructs import Construct

import trainium_job

from .. import _training
from ..deploy_time_build import HANDLER_ID, HANDLER_RUNTIME, PROJECT_ID
from ..nag import acknowledge_image_builds
from . import image_build

DOCKER_DIR = Path(__file__).resolve().parents[1] / "_docker"
TRAINING_DIR = Path(_training.__file__).resolve().parent
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
    return _assemble(files, context_digest(files), root)


def _assemble(files: dict[str, Path], digest: str, root: Path | None = None) -> Path:
    """Copy ``files`` (whose :func:`context_digest` is ``digest``) into a directory named after it."""
    target = (root or Path(tempfile.gettempdir())) / f"trainium-eks-image-{digest[:16]}"
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


def context_digest(files: dict[str, Path] | None = None) -> str:
    """SHA-256 of the build context: every file's path and bytes."""
    digest = hashlib.sha256()
    for rel, src in sorted((files or _context_files()).items()):
        digest.update(rel.encode() + b"\0" + src.read_bytes() + b"\0")
    return digest.hexdigest()


def context_bytes(context: Path) -> int:
    """Bytes the deploy uploads for the build context: its files deflated into one zip, as the
    CDK zips a directory asset."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(p for p in context.rglob("*") if p.is_file()):
            archive.write(path, path.relative_to(context).as_posix())
    return buffer.tell()


def base_image(dockerfile: str) -> str:
    """The image a Dockerfile builds FROM (``FROM ${BASE_IMAGE}`` resolved to the ARG's default)."""
    text = (DOCKER_DIR / dockerfile).read_text()
    (source,) = re.findall(r"^FROM\s+(\S+)", text, re.M)
    match = re.fullmatch(r"\$\{(\w+)\}", source)
    if match:
        (source,) = re.findall(rf"^ARG\s+{match[1]}=(\S+)", text, re.M)
    return source


def image_tag(name: str, digest: str, dockerfile: str, build_args: dict[str, str]) -> str:
    """``<name>-<16 hex>`` of the context, the Dockerfile and the build arguments: a changed file
    gives a new tag, the same context the same tag."""
    key = "\0".join([digest, dockerfile, *(f"{k}={v}" for k, v in sorted(build_args.items()))])
    return f"{name}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"


#: ECR actions a build needs on the platform's repository (push, and the reads a push makes).
ECR_PUSH_ACTIONS = (
    "ecr:BatchCheckLayerAvailability",
    "ecr:GetDownloadUrlForLayer",
    "ecr:BatchGetImage",
    "ecr:InitiateLayerUpload",
    "ecr:UploadLayerPart",
    "ecr:CompleteLayerUpload",
    "ecr:PutImage",
    "ecr:DescribeImages",
)
#: What ``aws ecr-public get-login-password`` and an authenticated pull from public.ecr.aws need
#: (the actions of the AWS managed policy AmazonElasticContainerRegistryPublicReadOnly the library
#: attaches; none supports resource-level permissions for these reads).
ECR_PUBLIC_READ_ACTIONS = (
    "ecr-public:GetAuthorizationToken",
    "sts:GetServiceBearerToken",
    "ecr-public:BatchCheckLayerAvailability",
    "ecr-public:GetRepositoryPolicy",
    "ecr-public:DescribeRepositories",
    "ecr-public:DescribeRegistries",
    "ecr-public:DescribeImages",
    "ecr-public:DescribeImageTags",
    "ecr-public:GetRepositoryCatalogData",
    "ecr-public:GetRegistryCatalogData",
)


#: The service through which S3 asks KMS on the caller's behalf (``kms:ViaService``: AWS KMS
#: Developer Guide, "AWS KMS condition keys", ``kms:ViaService``; the same value the CDK bootstrap
#: template's key policy names, ``s3.${AWS::Region}.amazonaws.com``).
S3_VIA_SERVICE = "s3.{region}.amazonaws.com"


def build_boundary_statements(
    *,
    context_object_arns: list[str],
    repository_arn: str,
    log_group_arn: str,
    key_arn: str,
    account_keys_arn: str,
    region: str,
) -> list[iam.PolicyStatement]:
    """The most the image-build role may do, whatever the library grants it: read the build
    contexts (not the rest of the bootstrap bucket), pull public base images, push to the
    platform's repository, write its own log group, use its own key, and have S3 decrypt the
    contexts with the bootstrap bucket's key (``account_keys_arn``: the keys of the stack's
    account and region)."""
    return [
        iam.PolicyStatement(actions=["s3:GetObject"], resources=context_object_arns),
        # GetAuthorizationToken has no resource-level permissions (Service Authorization Reference).
        iam.PolicyStatement(actions=["ecr:GetAuthorizationToken", *ECR_PUBLIC_READ_ACTIONS], resources=["*"]),
        iam.PolicyStatement(actions=list(ECR_PUSH_ACTIONS), resources=[repository_arn]),
        iam.PolicyStatement(
            actions=["logs:CreateLogStream", "logs:PutLogEvents"],
            resources=[log_group_arn, f"{log_group_arn}:*"],
        ),
        iam.PolicyStatement(
            actions=["kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey", "kms:DescribeKey"],
            resources=[key_arn],
        ),
        # The contexts lie in the CDK bootstrap bucket, SSE-KMS by default (the AWS managed aws/s3
        # key, or the key `cdk bootstrap` made or was given): GetObject has S3 call kms:Decrypt as
        # the role. The key policies grant that to the account's principals via S3, and a grant
        # to a role (not to one named session) is capped by the role's boundary (IAM User Guide,
        # "Permissions boundaries for IAM entities", resource-based policies): allowed here, for
        # this account's keys in this region, through S3 only.
        iam.PolicyStatement(
            actions=["kms:Decrypt"],
            resources=[account_keys_arn],
            conditions={"StringEquals": {"kms:ViaService": S3_VIA_SERVICE.format(region=region)}},
        ),
    ]


#: CodeBuild's terminal build statuses other than SUCCEEDED (``Build.buildStatus`` in the CodeBuild
#: API reference, all but IN_PROGRESS; the "CodeBuild Build State Change" event's ``build-status``).
#: The responder answers only those builds whose ``post_build`` did not answer
#: (:mod:`trainium_eks.images.build_responder`).
ENDED_WITHOUT_SUCCESS = ("FAILED", "FAULT", "STOPPED", "TIMED_OUT")
#: The responder's source, inlined as the Lambda function's code.
_RESPONDER_SOURCE = Path(__file__).with_name("build_responder.py")


#: The library's images: name -> its Dockerfile (the build context holds both).
LIBRARY_IMAGES = {"training": "Dockerfile", "tensorboard": "tensorboard.Dockerfile"}


class TrainingImages(Construct):
    """The library's images, built in the region into ``repository`` as ``training-<hash>`` and
    ``tensorboard-<hash>`` (the tools image: TensorBoard, the exporters, the job's submitter).

    Attributes:
        training_image / tensorboard_image: image URIs in the platform repository (plain strings).
        training_tag / tensorboard_tag: the content-hash tags (plain strings: stable job names).
        builds: the ContainerImageBuild constructs (apply jobs after them).
        project: the CodeBuild project that builds them (the library's per-stack singleton).
    """

    def __init__(self, scope: Construct, id: str, *, repository: ecr.IRepository) -> None:
        """
        Args:
            repository: the ECR repository the images are pushed to.
        """
        super().__init__(scope, id)
        built = _library_builds(self, repository, tuple(LIBRARY_IMAGES))
        self.builds = [build for build, _, _ in built.values()]
        self.project = harden_builds(self, repository, self.builds)
        (_, self.training_image, self.training_tag) = built["training"]
        (_, self.tensorboard_image, self.tensorboard_tag) = built["tensorboard"]


class ToolsImage(Construct):
    """The library's tools image alone (``tensorboard-<hash>``), for a job of the user's own image:
    its submitter, and the library's programs an init container copies into its pods.

    Attributes: image (its URI), tag, builds, project (as :class:`TrainingImages`').
    """

    def __init__(self, scope: Construct, id: str, *, repository: ecr.IRepository) -> None:
        """
        Args:
            repository: the ECR repository the image is pushed to.
        """
        super().__init__(scope, id)
        build, self.image, self.tag = _library_builds(self, repository, ("tensorboard",))["tensorboard"]
        self.builds = [build]
        self.project = harden_builds(self, repository, self.builds)


def _library_builds(
    scope: Construct, repository: ecr.IRepository, names: tuple[str, ...]
) -> dict[str, tuple[ContainerImageBuild, str, str]]:
    """Name -> (its build, its URI, its tag) of each of the library's images in ``names``."""
    files = _context_files()
    digest = context_digest(files)
    context = _assemble(files, digest)
    built = {}
    for name in names:
        dockerfile = LIBRARY_IMAGES[name]
        args = {image_build.BASE_DIGEST_ARG: image_build.base_digest_command(base_image(dockerfile))}
        tag = image_tag(name, digest, dockerfile, args)
        build = image_build_construct(
            scope, f"{name.title()}Build", directory=str(context), dockerfile=dockerfile,
            repository=repository, tag=tag, build_args=args,
        )  # fmt: skip
        built[name] = (build, f"{repository.repository_uri}:{tag}", tag)
    return built


def image_build_construct(
    scope: Construct,
    id: str,
    *,
    directory: str,
    dockerfile: str,
    repository: ecr.IRepository,
    tag: str,
    build_args: dict[str, str],
) -> ContainerImageBuild:
    """One in-region build of ``directory`` into ``repository:tag``."""
    build = ContainerImageBuild(
        scope,
        id,
        directory=directory,
        file=dockerfile,
        platform=ecr_assets.Platform.LINUX_AMD64,
        repository=repository,
        tag=tag,
        build_args=build_args,
    )
    # The custom resource waits at most this long for the build's answer (the build's own limits
    # stay under it: trainium_eks.images.image_build).
    cfn_resource = build.node.find_child("Resource").node.default_child
    assert isinstance(cfn_resource, CfnResource)
    cfn_resource.add_property_override("ServiceTimeout", image_build.CUSTOM_RESOURCE_TIMEOUT_S)
    return build


#: The attribute of a stack that holds its image builds' hardening (their boundary), once set: the
#: project is jsii's object, whose Python proxy keeps no attribute of ours.
_HARDENED = "_trainium_eks_boundary"


def harden_builds(
    owner: Construct, repository: ecr.IRepository, builds: list[ContainerImageBuild]
) -> codebuild.Project:
    """Set what the library leaves at defaults on its per-stack project and function, once per
    stack (the key, the logs, the boundary and the responder live under the first ``owner``);
    a later caller's build contexts and repository are added to the boundary."""
    stack = Stack.of(owner)
    project = stack.node.try_find_child(PROJECT_ID)
    handler = stack.node.try_find_child(HANDLER_ID)
    if not isinstance(project, codebuild.Project) or not isinstance(handler, lambda_.Function):
        raise LookupError(
            f"cdklabs-deploy-time-build no longer names its project {PROJECT_ID} and function {HANDLER_ID}: "
            "update trainium_eks.images.training_image for the installed version"
        )
    contexts = [build.node.find_child("Source") for build in builds]
    assert all(isinstance(c, s3_assets.Asset) for c in contexts)
    # Builds of one context share one object (keyed by its asset hash).
    context_arns = list(
        {c.asset_hash: c.bucket.arn_for_objects(c.s3_object_key) for c in contexts}.values()  # type: ignore[attr-defined]
    )
    boundary = getattr(stack, _HARDENED, None)
    if isinstance(boundary, iam.ManagedPolicy):
        boundary.add_statements(
            iam.PolicyStatement(actions=["s3:GetObject"], resources=context_arns),
            iam.PolicyStatement(actions=list(ECR_PUSH_ACTIONS), resources=[repository.repository_arn]),
        )
        return project
    key = kms.Key(
        owner,
        "BuildKey",
        enable_key_rotation=True,
        description="Image builds: CodeBuild artifacts and build logs",
        removal_policy=RemovalPolicy.DESTROY,
    )
    key.grant_encrypt_decrypt(iam.ServicePrincipal(f"logs.{stack.region}.amazonaws.com"))
    group = _encrypted_log_group(owner, "BuildLogs", key)
    _configure_project(project, key, group)
    key.grant_encrypt_decrypt(project)
    group.grant_write(project)
    boundary = iam.ManagedPolicy(
        owner,
        "BuildBoundary",
        description="Boundary of the image-build role: read the build contexts, push to the platform's repository",
        statements=build_boundary_statements(
            context_object_arns=context_arns,
            repository_arn=repository.repository_arn,
            log_group_arn=_log_group_arn(stack, group.log_group_name),
            key_arn=key.key_arn,
            account_keys_arn=stack.format_arn(service="kms", resource="key", resource_name="*"),
            region=stack.region,
        ),
    )
    assert project.role is not None
    iam.PermissionsBoundary.of(project.role).apply(boundary)
    setattr(stack, _HARDENED, boundary)
    cfn_handler = handler.node.default_child
    assert isinstance(cfn_handler, lambda_.CfnFunction)
    cfn_handler.runtime = HANDLER_RUNTIME
    _answer_ended_builds(owner, project, group, key)
    acknowledge_image_builds(owner)
    return project


def _configure_project(project: codebuild.Project, key: kms.Key, group: logs.LogGroup) -> None:
    """The project's key, limits, logs and buildspec (one that skips a tag already pushed)."""
    cfn_project = project.node.default_child
    assert isinstance(cfn_project, codebuild.CfnProject)
    # Attribute setters, not overrides: cdk-nag reads the properties (CB4).
    cfn_project.encryption_key = key.key_arn
    cfn_project.timeout_in_minutes = image_build.BUILD_TIMEOUT_MINUTES
    cfn_project.queued_timeout_in_minutes = image_build.BUILD_QUEUED_TIMEOUT_MINUTES
    cfn_project.logs_config = codebuild.CfnProject.LogsConfigProperty(
        cloud_watch_logs=codebuild.CfnProject.CloudWatchLogsConfigProperty(
            status="ENABLED", group_name=group.log_group_name
        )
    )
    cfn_project.add_property_override("Environment.ComputeType", image_build.BUILD_COMPUTE_TYPE)
    source = Stack.of(project).resolve(cfn_project.source)
    cfn_project.source = codebuild.CfnProject.SourceProperty(
        type=source["type"],
        build_spec=json.dumps(image_build.skip_existing_tag(json.loads(source["buildSpec"])), indent=2),
    )


def _answer_ended_builds(
    owner: Construct, project: codebuild.Project, build_logs: logs.LogGroup, key: kms.Key
) -> None:
    """A build that ends before its ``post_build`` (stopped at its limit, by hand, or failed in
    CodeBuild) answers CloudFormation through :mod:`trainium_eks.images.build_responder`, with its
    last log lines, instead of leaving the stack to wait out the custom resource's hour."""
    stack = Stack.of(owner)
    own_logs = logs.LogGroup(
        owner,
        "BuildResponderLogs",
        retention=logs.RetentionDays.ONE_MONTH,
        encryption_key=key,
        removal_policy=RemovalPolicy.DESTROY,
    )

    def group_arns(name: str) -> list[str]:
        arn = stack.format_arn(
            service="logs",
            resource="log-group",
            resource_name=name,
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        return [arn, f"{arn}:*"]

    role = iam.Role(
        owner,
        "BuildResponderRole",
        assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
        description="Answers CloudFormation for an image build that ended before answering it",
        inline_policies={
            "Answer": iam.PolicyDocument(
                statements=[
                    iam.PolicyStatement(
                        actions=["codebuild:BatchGetBuilds"], resources=[project.project_arn]
                    ),
                    iam.PolicyStatement(
                        actions=["logs:GetLogEvents"], resources=group_arns(build_logs.log_group_name)
                    ),
                    iam.PolicyStatement(
                        actions=["logs:CreateLogStream", "logs:PutLogEvents"],
                        resources=group_arns(own_logs.log_group_name),
                    ),
                ]
            )
        },
    )
    function = lambda_.Function(
        owner,
        "BuildResponder",
        runtime=lambda_.Runtime.PYTHON_3_14,
        handler="index.handler",
        # Its source file as it is, not the module: importing it would import boto3 at synth.
        code=lambda_.Code.from_inline(_RESPONDER_SOURCE.read_text()),
        timeout=Duration.minutes(1),
        role=role,
        log_group=own_logs,
        # No reserved concurrency: Lambda reserves at most the account's unreserved concurrency
        # minus 100 (Lambda Developer Guide, "Configuring reserved concurrency for a
        # function"), so on an account whose quota is 10, as new accounts' often is, any
        # reservation fails the stack. Nothing needs one: the rule sends one event per ended
        # build, two builds a deploy.
        description="Answers CloudFormation for an image build that ended before answering it",
    )
    events.Rule(
        owner,
        "BuildEnded",
        description="Image builds that ended without success: answer their custom resource",
        event_pattern=events.EventPattern(
            source=["aws.codebuild"],
            detail_type=["CodeBuild Build State Change"],
            detail={"project-name": [project.project_name], "build-status": list(ENDED_WITHOUT_SUCCESS)},
        ),
        targets=[targets.LambdaFunction(function, retry_attempts=2)],
    )


def _encrypted_log_group(scope: Construct, id: str, key: kms.IKey) -> logs.LogGroup:
    """A log group of the image builds: encrypted with their key, kept 30 days, deleted with the stack."""
    return logs.LogGroup(
        scope,
        id,
        retention=logs.RetentionDays.ONE_MONTH,
        encryption_key=key,
        removal_policy=RemovalPolicy.DESTROY,
    )


def _log_group_arn(stack: Stack, name: str) -> str:
    """``arn:...:log-group:<name>`` (its streams: the same with ``:*``)."""
    return stack.format_arn(
        service="logs", resource="log-group", resource_name=name, arn_format=ArnFormat.COLON_RESOURCE_NAME
    )
