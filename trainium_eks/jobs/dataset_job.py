"""What the two dataset constructs share: a batch Job that writes the training job's dataset to
FSx (on CPU nodes Karpenter launches for it, or on the Trainium nodegroup), named after its
content, applied after what it needs.

:class:`~trainium_eks.jobs.dataset_staging.DatasetStaging` copies a published shard set;
:class:`~trainium_eks.jobs.dataset_preparation.DatasetPreparation` makes one from a text corpus.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypedDict

from aws_cdk import aws_eks_v2 as eks
from constructs import Construct, IConstruct

from trainium_job.naming import content_named
from trainium_job.paths import DATA_MOUNT, JobPaths
from trainium_job.scheduling import (
    DATASET_NODE_LABEL,
    DATASET_TOLERATION,
    PREPARATION_NODE_LABEL,
    TRAINIUM_NODE_LABEL,
    WORKLOAD_TOLERATION,
)
from trainium_job.security import container_security_context

#: Size of the scratch ``/tmp`` of a dataset pod (the tools' temporary files, not the data).
SCRATCH_SIZE = "1Gi"


def pod_identity(service_account: str) -> dict[str, Any]:
    """The head of a dataset pod's spec: its service account, no API token, no restarts in place
    (the Job retries with a new pod)."""
    return {
        "serviceAccountName": service_account,
        "automountServiceAccountToken": False,
        "restartPolicy": "Never",
    }


def trainium_placement() -> dict[str, Any]:
    """On a Trainium node (it pulls the training image anyway), tolerating its taint."""
    return {"nodeSelector": dict(TRAINIUM_NODE_LABEL), "tolerations": [dict(WORKLOAD_TOLERATION)]}


def dataset_node_placement() -> dict[str, Any]:
    """On the small node Karpenter launches for staging (``trainium_capacity=karpenter``)."""
    return {"nodeSelector": dict(DATASET_NODE_LABEL), "tolerations": [dict(DATASET_TOLERATION)]}


def preparation_node_placement() -> dict[str, Any]:
    """On the CPU nodes Karpenter launches for the preparation pods (``trainium_capacity=karpenter``)."""
    return {"nodeSelector": dict(PREPARATION_NODE_LABEL), "tolerations": [dict(DATASET_TOLERATION)]}


def dataset_container(
    *, name: str, image: str, command: list[str], resources: dict[str, Any]
) -> dict[str, Any]:
    """A dataset container: FSx at /data, a read-only root with the scratch files (HOME too) on an
    emptyDir /tmp."""
    return {
        "name": name,
        "image": image,
        "command": command,
        "resources": resources,
        "env": [{"name": "HOME", "value": "/tmp"}],
        "volumeMounts": [
            {"name": "data", "mountPath": DATA_MOUNT},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
        "securityContext": container_security_context(read_only_root=True),
    }


def dataset_volumes(claim_name: str) -> list[dict[str, Any]]:
    """The volumes of :func:`dataset_container`: the FSx claim and the scratch /tmp."""
    return [
        {"name": "data", "persistentVolumeClaim": {"claimName": claim_name}},
        {"name": "tmp", "emptyDir": {"sizeLimit": SCRATCH_SIZE}},
    ]


class DatasetJobProps(TypedDict):
    """The props both dataset constructs take (keyword-only), for passing them on as one."""

    #: The EKS cluster (with a kubectl provider).
    cluster: eks.ICluster
    #: Namespace of the Job (the FSx claim's).
    namespace: str
    #: The training image URI (may be a token).
    image: str
    #: A plain string identifying ``image`` (its tag), for the Job's name.
    image_key: str
    #: The training job's FSx layout: the shards go to ``data_dir``, then the marker.
    paths: JobPaths
    #: The FSx claim (mounted at /data).
    claim_name: str
    #: An existing service account in ``namespace`` (no AWS role).
    service_account: str
    #: Constructs applied first (the constructs' default: ``()``).
    depends_on: Sequence[IConstruct]


class DatasetJob(Construct):
    """A dataset Job applied by the stack; its name (and construct id) follow its spec, like the
    training job's, so a changed spec is a new Job and an unchanged one is left alone.

    The props both dataset constructs take: :class:`DatasetJobProps`.

    Attributes: job_name, manifest, job (the Job as a dict).
    """

    def _apply_job(
        self,
        base_name: str,
        build: Callable[[str, str], dict[str, Any]],
        *,
        draft_name: str,
        cluster: eks.ICluster,
        image: str,
        image_key: str,
        depends_on: Sequence[IConstruct],
    ) -> None:
        """Name the Job ``build(name, image)`` makes after its content, and apply it."""
        self.job_name, digest, self.job = content_named(
            base_name, lambda name, draft: build(name, image_key if draft else image), draft_name=draft_name
        )
        self.manifest = eks.KubernetesManifest(self, f"Job{digest}", cluster=cluster, manifest=[self.job])
        for dependency in depends_on:
            self.manifest.node.add_dependency(dependency)
