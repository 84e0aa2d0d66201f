"""The in-region image build as its consumers define it: CodeBuild (the project the library
creates) and cdklabs-deploy-time-build 0.1.14 (its buildspec, its build command, its custom
resource), read in the synthesized template, where the library's own code has put them.

Sources: the AWS CodeBuild User Guide and API reference ("Build environment compute modes and
types"; ``ProjectEnvironment.privilegedMode``; ``Project.timeoutInMinutes`` 5-2160 and
``queuedTimeoutInMinutes`` 5-480); AWS CloudFormation ``AWS::CloudFormation::CustomResource``
``ServiceTimeout`` (1-3600 s); cdklabs/deploy-time-build 0.1.14 ``lib/container-image-build.js``;
the CodeBuild API reference (``Build.buildStatus``, BatchGetBuilds) and its model in botocore; the
CodeBuild User Guide's "Build notifications input format reference"; the CDK CLI's bootstrap
template (aws-cdk 2.1148.1).
"""

from __future__ import annotations

#: CodeBuild: "privilegedMode: Enables running the Docker daemon inside a Docker container. Set to
#: true only if the build project is used to build Docker images" (API reference, ProjectEnvironment).
#: The library builds with ``docker buildx``: privileged is needed, and nothing else is.
PRIVILEGED_NEEDED_FOR = "docker buildx build"
#: Linux compute types by memory and disk (GB), CodeBuild User Guide, "Build environment compute modes
#: and types" (EC2 compute, Linux): the build's disk must hold the base image twice (pulled, then
#: exported into the Docker store for the push).
COMPUTE_TYPES: dict[str, tuple[int, int]] = {
    "BUILD_GENERAL1_SMALL": (3, 64),
    "BUILD_GENERAL1_MEDIUM": (7, 128),
    "BUILD_GENERAL1_LARGE": (15, 128),
}
#: CodeBuild limits: build timeout 5-2160 minutes, queued timeout 5-480 minutes (API reference, Project).
TIMEOUT_RANGE_MINUTES = (5, 2160)
QUEUED_TIMEOUT_RANGE_MINUTES = (5, 480)
#: A custom resource's ServiceTimeout: "The maximum time, in seconds, that can elapse before a custom
#: resource operation times out. The value must be an integer from 1 to 3600." (CloudFormation
#: User Guide, AWS::CloudFormation::CustomResource).
CUSTOM_RESOURCE_TIMEOUT_MAX_S = 3600
#: The library's handler only starts the build and returns (lambda/trigger-codebuild ``StartBuild``);
#: its function's own limit (5 min, container-image-build.js) is spent before the build starts.
HANDLER_TIMEOUT_S = 300
#: What the library's buildspec does, as lines of it (container-image-build.js, ``BuildSpec.fromObject``):
#: the build command is run through ``eval`` (so a ``$(...)`` in a build argument runs in the build),
#: and post_build answers CloudFormation itself, FAILED with a link to the build's log stream.
BUILDSPEC_BUILD_LINES = ('eval "$buildCommand"', "docker push $repositoryUri:$imageTag")
BUILDSPEC_POST_BUILD_MARKERS = (
    "CODEBUILD_BUILD_SUCCEEDING",
    "STATUS='FAILED'",
    "log-events/$CODEBUILD_LOG_PATH",
)
#: The library renders each build argument as ``--build-arg KEY=VALUE``, unquoted
#: (container-image-build.js ``getDockerBuildCommand``).
BUILD_ARG_FORM = "--build-arg {key}={value}"

#: The OCI image spec's pre-defined annotation keys for the base image ("Pre-Defined Annotation Keys":
#: ``org.opencontainers.image.base.digest``, "Digest of the image this image is based on", and
#: ``org.opencontainers.image.base.name``, "Image reference of the image this image is based on";
#: opencontainers/image-spec annotations.md, v1.1.0), which the Dockerfiles set as labels.
OCI_BASE_DIGEST = "org.opencontainers.image.base.digest"
OCI_BASE_NAME = "org.opencontainers.image.base.name"
#: What a custom resource's response carries (CloudFormation User Guide, "Custom resource response
#: objects": Status, Reason, PhysicalResourceId, StackId, RequestId, LogicalResourceId, NoEcho, Data).
RESPONSE_FIELDS = frozenset(
    {"Status", "Reason", "PhysicalResourceId", "StackId", "RequestId", "LogicalResourceId", "NoEcho", "Data"}
)
#: Where the library's start function is shipped: the jsii package inside the wheel.
HANDLER_SOURCE = "package/lambda/trigger-codebuild/dist/index.js"

#: ``Build.buildStatus``, CodeBuild API reference ("Build": "FAILED: The build failed. FAULT: The
#: build faulted. IN_PROGRESS: The build is still in progress. STOPPED: The build stopped.
#: SUCCEEDED: The build succeeded. TIMED_OUT: The build timed out."); botocore's codebuild service
#: model (``StatusType``) at the installed version is checked against it. Every status but
#: IN_PROGRESS ends a build.
BUILD_STATUSES = frozenset({"FAILED", "FAULT", "IN_PROGRESS", "STOPPED", "SUCCEEDED", "TIMED_OUT"})
TERMINAL_BUILD_STATUSES = BUILD_STATUSES - {"IN_PROGRESS"}
#: The "CodeBuild Build State Change" event names its build by ARN (CodeBuild User Guide, "Build
#: notifications input format reference": ``"build-id": "arn:aws:codebuild:us-west-2:123456789012:
#: build/my-sample-project:8745a7a9-..."``); BatchGetBuilds takes ``ids``, "The IDs of the builds"
#: (API reference, BatchGetBuilds), an ID being ``Build.id`` ("The unique ID for the build",
#: ``<project>:<uuid>``), not ``Build.arn``.
EVENT_BUILD_ARN = "arn:aws:codebuild:us-west-2:123456789012:build/{build_id}"
BATCH_GET_BUILDS_PARAMETER = "ids"
#: The library's post_build ends with the answer to CloudFormation (container-image-build.js,
#: buildspec ``post_build``: ``curl -i -X PUT ... "$responseURL"``, the last line of its last
#: command): a build whose POST_BUILD phase SUCCEEDED has answered.
POST_BUILD_ANSWER = 'curl -i -X PUT -H \'Content-Type:\' -d "@payload.json" "$responseURL"'

#: The CDK CLI's bootstrap template, as the pinned CLI (package.json: aws-cdk 2.1148.1) ships it:
#: the asset bucket (``StagingBucket``) is SSE-KMS (``SSEAlgorithm: aws:kms``) with the key
#: ``FileAssetsBucketKmsKeyId`` names: the AWS managed aws/s3 key (``AWS_MANAGED_KEY``, what
#: ``cdk bootstrap`` passes unless ``--bootstrap-customer-key`` or ``--bootstrap-kms-key-id``), a
#: key the template makes (whose policy grants the account's principals ``kms:Decrypt`` with
#: ``kms:ViaService`` s3.${AWS::Region}.amazonaws.com), or a key given by ID.
BOOTSTRAP_TEMPLATE = "node_modules/aws-cdk/lib/api/bootstrap/bootstrap-template.yaml"
CDK_CLI_VERSION = "2.1148.1"
