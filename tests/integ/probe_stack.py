"""The acceptance probe's stack: a Job that looks at /data, and the Lambda function that reads
the cluster for the integ assertion (:mod:`tests.integ.probe.handler`).

Why a function of our own: ``aws_eks_v2.KubernetesObjectValue`` reads one JSONPath of one named
object within its kubectl provider's single invocation (at most 15 minutes), and cannot list
nodes, wait for a phase or read logs; the integ-tests ``awsApiCall`` speaks AWS APIs, not the
Kubernetes API. The function reads the Kubernetes API directly (read-only access entry), and the
integ assertion invokes it until its answer equals the expected verdict (``waitForAssertions``).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from aws_cdk import Duration, Environment, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from stacks import TrainingStack
from trainium_eks import PlatformConfig, TrainiumPlatform
from trainium_job import EFA_RESOURCE, NEURON_RESOURCE, TRAINIUM_NODE_LABEL, WORKLOAD_TOLERATION
from trainium_job.paths import DATA_MOUNT
from trainium_job.security import container_security_context, pod_security_context

PROBE_CODE = Path(__file__).parent / "probe"
#: The batch/v1 Job that mounts the claim, waits for the dataset marker and shows both.
FSX_PROBE_JOB = "integ-fsx-probe"
#: How long the probe Job waits for the staging Job's marker.
MARKER_WAIT_S = 3000
#: EKS access policy of the function: read every object, change none.
VIEW_POLICY = "AmazonEKSAdminViewPolicy"


def fsx_probe_job(*, namespace: str, claim_name: str, image: str, marker: str) -> dict[str, Any]:
    """The probe Job: prints ``marker: <content>`` and the /data line of /proc/mounts."""
    script = "\n".join(
        [
            "set -eu",
            f"deadline=$(( $(date +%s) + {MARKER_WAIT_S} ))",
            f"until [ -f {shlex.quote(marker)} ]; do",
            "  if [ $(date +%s) -ge $deadline ]; then echo 'no dataset marker' >&2; exit 1; fi",
            "  sleep 20",
            "done",
            f'echo "marker: $(cat {shlex.quote(marker)})"',
            "grep ' /data ' /proc/mounts",
        ]
    )
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": FSX_PROBE_JOB, "namespace": namespace},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "nodeSelector": dict(TRAINIUM_NODE_LABEL),
                    "tolerations": [dict(WORKLOAD_TOLERATION)],
                    "securityContext": pod_security_context(),
                    "containers": [
                        {
                            "name": "probe",
                            "image": image,
                            "command": ["bash", "-c", script],
                            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                            "volumeMounts": [{"name": "data", "mountPath": DATA_MOUNT, "readOnly": True}],
                            "securityContext": container_security_context(read_only_root=True),
                        }
                    ],
                    "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim_name}}],
                }
            },
        },
    }


class ProbeStack(Stack):
    """The probe Job and function, after the training stack (its own stack: the platform's and
    the workload's templates stay the ones ``make synth`` makes, apart from outputs they export).

    Attributes:
        function: the probe function (the assertion invokes it).
        nodes: the Trainium nodes it expects.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        platform: TrainiumPlatform,
        training: TrainingStack,
        config: PlatformConfig,
    ) -> None:
        super().__init__(
            scope,
            id,
            env=Environment(region=config.region),
            stack_name=f"{config.name_prefix}-probe",
            description="Acceptance probe of the Trainium platform (make integ)",
        )
        self.add_stack_dependency(training)
        target = platform.workload_target_in(self)
        workload = training.workload
        image = target.repository.repository_uri_for_tag(workload.images.training_tag)
        eks.KubernetesManifest(
            self,
            "FsxProbe",
            cluster=target.cluster,
            manifest=[
                fsx_probe_job(
                    namespace=target.namespace,
                    claim_name=target.claim_name,
                    image=image,
                    marker=config.training.paths.dataset_marker,
                )
            ],
        )
        cluster = platform.cluster.cluster
        role = iam.Role(
            self,
            "ProbeRole",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            managed_policies=[
                iam.ManagedPolicy.from_aws_managed_policy_name("service-role/AWSLambdaVPCAccessExecutionRole")
            ],
        )
        role.add_to_policy(
            iam.PolicyStatement(actions=["eks:DescribeCluster"], resources=[cluster.cluster_arn])
        )
        facts = config.facts
        allocatable = {NEURON_RESOURCE: str(facts.neuron_devices), EFA_RESOURCE: str(facts.efa_interfaces)}
        self.nodes = config.desired_nodes
        self.function = lambda_.Function(
            self,
            "Probe",
            runtime=lambda_.Runtime.PYTHON_3_13,
            handler="handler.handler",
            code=lambda_.Code.from_asset(str(PROBE_CODE), exclude=["__pycache__", "*.pyc", "__init__.py"]),
            timeout=Duration.minutes(2),
            memory_size=512,
            role=role,
            # The API endpoint is private by default: the function talks to it from the VPC, with
            # the cluster security group (which admits its own members to the control plane).
            vpc=platform.network.vpc,
            vpc_subnets=ec2.SubnetSelection(subnets=platform.network.private_subnets),
            security_groups=[cluster.cluster_security_group],
            environment={
                "CLUSTER_NAME": cluster.cluster_name,
                "NAMESPACE": target.namespace,
                "CLAIM_NAME": target.claim_name,
                "JOB_NAME": workload.job.job_name,
                "TASK_NAME": "worker",
                "CONTAINER": "trainer",
                "NODES": str(config.desired_nodes),
                "NODE_SELECTOR": ",".join(f"{k}={v}" for k, v in TRAINIUM_NODE_LABEL.items()),
                "ALLOCATABLE": json.dumps(allocatable, sort_keys=True),
                "PROBE_JOB": FSX_PROBE_JOB,
            },
        )
        eks.AccessEntry(
            self,
            "ProbeAccess",
            cluster=cluster,
            principal=role.role_arn,
            access_policies=[
                eks.AccessPolicy.from_access_policy_name(
                    VIEW_POLICY, access_scope_type=eks.AccessScopeType.CLUSTER
                )
            ],
        )
