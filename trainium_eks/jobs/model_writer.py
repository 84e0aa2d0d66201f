"""What lets a training job put its models in the model bucket: the job's ServiceAccount gets an
EKS Pod Identity role that may write its runs' model prefixes and nothing else
(:func:`~trainium_eks.storage.model_bucket.grant_model_write`), and the job's namespace a
ConfigMap naming the bucket, which the pods read into
:data:`~trainium_job.paths.MODEL_BUCKET_ENV` (:func:`trainium_job.pod.model_bucket_env`).

The bucket's name is known only at deploy (CloudFormation names it; another stack reads it from
the platform's output), so it is kept out of the Volcano Job, whose name hashes its content: a
token's number changes between two synths of the same app. The pods' credentials come from the
EKS Pod Identity agent through the volume its webhook adds to the pod, not the ServiceAccount
token the pods do not mount (EKS user guide, "Understand how EKS Pod Identity works": the
webhook sets ``AWS_CONTAINER_CREDENTIALS_FULL_URI`` and ``AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE``
and mounts ``eks-pod-identity-token``).
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import CfnOutput
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_s3 as s3
from constructs import Construct

from trainium_job.paths import MODEL_BUCKET_CONFIG_MAP, MODEL_BUCKET_KEY, model_commands, model_key_prefix

from ..arguments import AnyCluster, require_cluster
from ..cluster.managed_addons import pod_identity_association, pod_identity_role
from ..nag import MODEL_WRITER_ACKNOWLEDGEMENTS, acknowledge_own_findings, printed_field
from ..storage.model_bucket import grant_model_write


class ModelWriter(Construct):
    """The role and the ConfigMap a job's exporting pod uploads its models with.

    Args:
        cluster: the cluster (with a kubectl provider).
        bucket_name: the model bucket (may be a token).
        namespace: the job's namespace (the ConfigMap's).
        service_account: the job pods' ServiceAccount (the Pod Identity association's).
        runs: the job's run names: the role writes ``<run>/model/`` of each.

    Attributes: role, association, config_map (apply the job after it: a pod reads it at its
    start), bucket.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: AnyCluster,
        bucket_name: str,
        namespace: str,
        service_account: str,
        runs: Sequence[str],
    ) -> None:
        super().__init__(scope, id)
        cluster = require_cluster(cluster)
        self.bucket = s3.Bucket.from_bucket_name(self, "Bucket", bucket_name)
        self.role = pod_identity_role(
            self,
            "Role",
            description="A training job's exporting pod: uploads its runs' models to the model bucket",
        )
        for run in dict.fromkeys(runs):
            grant_model_write(self.role, self.bucket, model_key_prefix(run))
        self.association = pod_identity_association(
            self,
            "Association",
            cluster=cluster,
            namespace=namespace,
            service_account=service_account,
            role=self.role,
        )
        self.config_map = eks.KubernetesManifest(
            self,
            "BucketName",
            cluster=cluster,
            manifest=[
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": MODEL_BUCKET_CONFIG_MAP, "namespace": namespace},
                    "data": {MODEL_BUCKET_KEY: bucket_name},
                }
            ],
        )
        for n, run in enumerate(dict.fromkeys(runs), start=1):
            uri = f"s3://{bucket_name}/{model_key_prefix(run)}/"
            fetch, load = model_commands(uri, f"{run}-model")
            CfnOutput(self, f"Model{n}Uri", value=uri, description=f"Where run {run}'s model is uploaded")
            CfnOutput(
                self,
                f"Model{n}Fetch",
                value=f"{fetch} && {load}",
                description=f"Fetch and load run {run}'s model",
            )
        bucket = printed_field(self, "<model-bucket>", bucket_name)
        for run in dict.fromkeys(runs):
            acknowledge_own_findings(self, MODEL_WRITER_ACKNOWLEDGEMENTS, fields={**bucket, "<run>": run})
