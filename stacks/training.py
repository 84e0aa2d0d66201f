"""Composition of the training workload on the platform stack (images, staging, job, TensorBoard)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainium_eks.config import PlatformConfig
from trainium_eks.dataset_preparation import DatasetPreparation
from trainium_eks.dataset_staging import DatasetStaging
from trainium_eks.tensorboard import TensorBoard
from trainium_eks.training_image import TrainingImages
from trainium_eks.training_job import BertPretrainingJob, add_job_outputs


@dataclass
class TrainingWorkload:
    images: TrainingImages
    job: BertPretrainingJob
    staging: DatasetStaging | DatasetPreparation  # preparation_enabled: made from your corpus
    tensorboard: TensorBoard


def add_training(stack: Any, config: PlatformConfig) -> TrainingWorkload:
    """Build the workload from the platform stack's storage, registry and add-ons."""
    cluster = stack.cluster.cluster
    volume = stack.storage_volume
    addons = stack.addons
    images = TrainingImages(stack, "TrainingImages", repository=stack.registry.repository)
    # Volcano's CRDs and queue, the claim, and the images before any job is applied.
    before = [addons.volcano.chart, addons.volcano.queue, volume.volume_manifest, *images.copies]
    job = BertPretrainingJob(
        stack,
        "Training",
        cluster=cluster,
        facts=config.facts,
        nodes=config.desired_nodes,
        max_nodes=config.max_nodes,
        image=images.training_image,
        image_key=images.training_tag,
        namespace=volume.namespace,
        claim_name=volume.claim_name,
        queue=addons.queue_name,
        spec=config.training,
        etcd_endpoint=addons.etcd_endpoint,
        name_prefix=config.name_prefix,
        depends_on=before,
    )
    if addons.etcd is not None and config.training.rdzv_backend != "c10d":
        job.manifest.node.add_dependency(addons.etcd)
    dataset_needs = [volume.volume_manifest, job.service_account_manifest, *images.copies]
    if config.preparation_enabled:
        staging: DatasetStaging | DatasetPreparation = DatasetPreparation(
            stack,
            "DatasetPreparation",
            cluster=cluster,
            namespace=volume.namespace,
            image=images.training_image,
            image_key=images.training_tag,
            paths=job.paths,
            claim_name=volume.claim_name,
            service_account=job.service_account,
            corpus=config.preparation_corpus,
            vocab=config.preparation_vocab,
            pods=config.preparation_pods,
            cpus_per_pod=config.preparation_cpus_per_pod,
            args=dict(config.preparation_args),
            facts=config.facts,
            nodes=config.desired_nodes,
            depends_on=dataset_needs,
        )
        # Applied first, its pods take their CPUs before the training gang (which waits for
        # the marker anyway) holds whole nodes.
        job.manifest.node.add_dependency(staging.manifest)
    else:
        staging = DatasetStaging(
            stack,
            "DatasetStaging",
            cluster=cluster,
            namespace=volume.namespace,
            image=images.training_image,
            image_key=images.training_tag,
            paths=job.paths,
            claim_name=volume.claim_name,
            service_account=job.service_account,
            source=config.training_dataset_source,
            depends_on=dataset_needs,
        )
    tensorboard = TensorBoard(
        stack,
        "TensorBoard",
        cluster=cluster,
        namespace=volume.namespace,
        image=images.tensorboard_image,
        claim_name=volume.claim_name,
        depends_on=[volume.volume_manifest, *images.copies],
    )
    add_job_outputs(stack, job=job, namespace=volume.namespace)
    return TrainingWorkload(images, job, staging, tensorboard)
