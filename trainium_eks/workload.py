"""The training workload as one construct: images, dataset, the BERT job, TensorBoard, outputs.

It needs a cluster and a few names, not the platform: :class:`WorkloadTarget` says where it runs.
``TrainiumPlatform.workload_target`` gives the platform's; for a cluster you already have,
import it with ``aws_eks_v2.Cluster.from_cluster_attributes`` and its kubectl provider and name
its FSx claim, Volcano queue and an ECR repository.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from aws_cdk import Token
from aws_cdk import aws_ecr as ecr
from constructs import Construct, IConstruct

from trainium_job import checks
from trainium_job.job import SERVICE_ACCOUNT, FabricHeal
from trainium_job.paths import spend_dir
from trainium_job.pod_program.description import Budget
from trainium_job.scheduling import TRAINING_NAMESPACE, TRAINING_QUEUE
from trainium_job.waits import Wait
from trainium_job.worker import DATA_ALREADY_STAGED_S

from .arguments import ClusterArgument, check_stack_region, require_cluster
from .config import PlatformConfig
from .images.training_image import TrainingImages
from .jobs.dataset_job import DatasetJobProps
from .jobs.dataset_preparation import DatasetPreparation
from .jobs.dataset_staging import DatasetStaging
from .jobs.heldout_staging import HeldOutStaging, eval_samples
from .jobs.node_fit import node_fit
from .jobs.tensorboard import TensorBoard
from .jobs.training_job import BertPretrainingJob, add_job_outputs
from .monitoring.exporters import TrainingExporters
from .nodes.health_checks import NodeHealthCheck
from .report.job_estimate import (
    Deadline,
    first_data_deadline,
    job_ceiling,
    node_start_minutes,
    phase2_data_deadline,
    phase_shape,
)
from .storage.fsx_csi import CLAIM_NAME


@dataclass(frozen=True, kw_only=True)
class WorkloadTarget:
    """Where a :class:`TrainingWorkload` runs. Each default is the platform's own name."""

    #: The ``aws_eks_v2`` cluster, with a kubectl provider (an imported one needs ``kubectl_provider``):
    #: any of :data:`AnyCluster` is taken, and it reads back as ``eks.ICluster`` (pass it on to
    #: ``eks.KubernetesManifest`` and the like without a cast).
    cluster: ClusterArgument = ClusterArgument()
    #: ECR repository the training and TensorBoard images are copied into.
    repository: ecr.IRepository
    #: Namespace of the workload's objects; the FSx claim lives there.
    namespace: str = TRAINING_NAMESPACE
    #: ReadWriteMany claim of the FSx for Lustre volume, mounted at /data.
    claim_name: str = CLAIM_NAME
    #: Volcano queue of the training job.
    queue_name: str = TRAINING_QUEUE
    #: ``host:port`` of an etcd server with the v2 API, for the etcd rendezvous. None: c10d only.
    etcd_endpoint: str | None = None
    #: Applied before anything that mounts the claim (the claim's volume). Empty: it exists.
    claim_dependencies: Sequence[IConstruct] = ()
    #: Applied before the Volcano Job (Volcano's chart and the queue). Empty: they exist.
    queue_dependencies: Sequence[IConstruct] = ()
    #: Applied before a job with the etcd rendezvous (the etcd server). Empty: it exists.
    etcd_dependencies: Sequence[IConstruct] = ()
    #: The cluster runs the platform's monitoring (kube-prometheus-stack: the PodMonitor CRD and
    #: the Prometheus that scrapes the workload's exporters). False: no exporters are deployed.
    monitoring: bool = False
    #: Applied before the exporters and their PodMonitors (the monitoring chart). Empty: it exists.
    monitoring_dependencies: Sequence[IConstruct] = ()
    #: The Trainium nodes the job runs on: instance type, nodes at start and at most, and how they
    #: come (``trainium_capacity``). ``TrainiumPlatform.workload_target`` fills them from the
    #: platform, and the workload takes them from here rather than from its ``config``. None: the
    #: config's ``instance_type``, ``desired_nodes``, ``max_nodes`` and ``trainium_capacity``.
    instance_type: str | None = None
    desired_nodes: int | None = None
    max_nodes: int | None = None
    trainium_capacity: str | None = None
    #: Name of the S3 bucket the trained models are written to, under ``<run>/model/``
    #: (``TrainiumPlatform.model_bucket``; in another stack, its ``WorkloadModelBucketName``
    #: output). None: no model bucket.
    model_bucket_name: str | None = None

    def __post_init__(self) -> None:
        for name in ("desired_nodes", "max_nodes"):
            value = getattr(self, name)
            if value is not None and not Token.is_unresolved(value):
                checks.whole_number(f"WorkloadTarget.{name}", value, minimum=1)

    def settle(self, config: PlatformConfig) -> PlatformConfig:
        """``config`` with the node fields this target carries (checked again as one config)."""
        nodes = {
            name: getattr(self, name)
            for name in ("instance_type", "desired_nodes", "max_nodes", "trainium_capacity")
            if getattr(self, name) is not None
        }
        if not nodes or all(getattr(config, name) == value for name, value in nodes.items()):
            return config
        if "desired_nodes" in nodes or "max_nodes" in nodes:
            # The config's minimum must not exceed the target's sizes.
            nodes.setdefault(
                "min_nodes", min(config.min_nodes, nodes.get("desired_nodes", config.desired_nodes))
            )
        return dataclasses.replace(config, **nodes)


class TrainingWorkload(Construct):
    """BERT pretraining on a Trainium cluster: images, dataset staging or preparation, the
    Volcano Job, TensorBoard and the stack outputs with the commands to watch it.

    Props (keyword-only):
        target: where it runs (:class:`WorkloadTarget`); the nodes it names win over the config's.
        config: the job settings: the ``training_*`` and ``preparation_*`` fields of
            :class:`PlatformConfig`, with ``instance_type``, ``desired_nodes``, ``max_nodes`` and
            ``name_prefix`` (defaults documented there).

    Attributes:
        config (the settings it was built with, the target's nodes applied),
        images (:class:`TrainingImages`), job (:class:`BertPretrainingJob`), staging
        (:class:`DatasetStaging`, or :class:`DatasetPreparation` with ``preparation_enabled``: the
        first phase's shards), phase2_staging (:class:`DatasetStaging` of phase 2's shards, and
        of its start with ``training_phases=2``; None with ``training_phases=1``),
        tensorboard (:class:`TensorBoard`), exporters (:class:`TrainingExporters`: the EFA and
        FSx exporters, when the target has monitoring and ``monitoring_exporters`` is on; else None),
        node_health (:class:`NodeHealthCheck`: the deep check of new Trainium nodes, with
        ``trainium_health_check``; else None), heldout_stagings (a :class:`HeldOutStaging` per
        phase with a held-out set, in the phases' order: ``heldout_enabled``).

    Its own cdk-nag acknowledgements (the image copy's role) are applied on this construct.
    Give it the ID ``Default`` to keep the logical IDs the workload had inside the platform stack.
    """

    def __init__(self, scope: Construct, id: str, *, target: WorkloadTarget, config: PlatformConfig) -> None:
        super().__init__(scope, id)
        check_stack_region(self, config.region, owner="TrainingWorkload")
        config = self.config = target.settle(config)
        cluster = require_cluster(target.cluster, "WorkloadTarget.cluster")
        claim_ready = list(target.claim_dependencies)
        self.images = TrainingImages(self, "TrainingImages", repository=target.repository)
        builds = list(self.images.builds)
        dataset: DatasetJobProps = {
            "cluster": cluster,
            "namespace": target.namespace,
            "image": self.images.training_image,
            "image_key": self.images.training_tag,
            "paths": config.phase_jobs[0].paths,
            "claim_name": target.claim_name,
            "service_account": SERVICE_ACCOUNT,
            "depends_on": [*claim_ready, *builds],
        }
        self.staging: DatasetStaging | DatasetPreparation
        self._stage_datasets(config, dataset)
        self.job = _pretraining_job(
            self,
            target=target,
            config=config,
            images=self.images,
            waits=_job_waits(config, self.staging, self.phase2_staging),
            depends_on=[*target.queue_dependencies, *claim_ready, *builds],
        )
        for staging in (self.staging, self.phase2_staging):
            if staging is not None:
                staging.manifest.node.add_dependency(self.job.service_account_manifest)
        if config.training.rdzv_backend != "c10d":
            for server in target.etcd_dependencies:
                self.job.manifest.node.add_dependency(server)
        self.tensorboard = TensorBoard(
            self,
            "TensorBoard",
            cluster=cluster,
            namespace=target.namespace,
            image=self.images.tensorboard_image,
            claim_name=target.claim_name,
            depends_on=[*claim_ready, *builds],
        )
        self.exporters = None
        if target.monitoring and config.monitoring_exporters:
            self.exporters = TrainingExporters(
                self,
                "Exporters",
                cluster=cluster,
                namespace=target.namespace,
                image=self.images.tensorboard_image,
                claim_name=target.claim_name,
                facts=config.facts,
                depends_on=[*claim_ready, *builds, *target.monitoring_dependencies],
            )
        self.node_health = None
        if config.trainium_health_check:
            self.node_health = NodeHealthCheck(
                self,
                "NodeHealthCheck",
                cluster=cluster,
                image=self.images.training_image,
                facts=config.facts,
                namespace=target.namespace,
                replace=config.trainium_health_replace,
                training_service_account=self.job.service_account,
                depends_on=[*claim_ready, *builds],
            )
        add_job_outputs(self, job=self.job, namespace=target.namespace)

    def _stage_datasets(self, config: PlatformConfig, dataset: DatasetJobProps) -> None:
        """The first phase's shards (staged, or prepared from a corpus) and phase 2's, each a Job
        of its own with ``dataset``'s props; sets :attr:`staging` and :attr:`phase2_staging`.
        Phase 2's staging waits for phase 1's shards, so that the two never share the file
        system's throughput: it runs during phase 1's training."""
        # With Karpenter, dataset work runs on CPU nodes it launches for it, never on a Trainium node.
        on_dataset_node = config.trainium_capacity == "karpenter"
        if config.preparation_enabled:
            self.staging = DatasetPreparation(
                self,
                "DatasetPreparation",
                **dataset,
                corpus=config.preparation_corpus,
                vocab=config.preparation_vocab,
                pods=config.preparation_pods,
                cpus_per_pod=config.preparation_cpus_per_pod,
                args=dict(config.preparation_args),
                facts=config.facts,
                nodes=config.desired_nodes,
                on_preparation_nodes=on_dataset_node,
            )
        elif config.training_phases != "2":
            self.staging = DatasetStaging(
                self,
                "DatasetStaging",
                **dataset,
                source=config.training_dataset_source,
                vocab=config.vocab_source,
                on_dataset_node=on_dataset_node,
            )
        self.phase2_staging = None
        if config.training_phases != "1":
            after = (
                () if config.training_phases == "2" else (_staged(self.staging, first_data_deadline(config)),)
            )
            phase2_dataset: DatasetJobProps = {**dataset, "paths": config.phase2_job.paths}
            self.phase2_staging = DatasetStaging(
                self,
                "Phase2DatasetStaging",
                **phase2_dataset,
                source=config.phase2_dataset_source,
                vocab="" if config.preparation_enabled else config.vocab_source,
                start=config.phase2_init_from if config.training_phases == "2" else "",
                model=config.training.model,
                on_dataset_node=on_dataset_node,
                waits=after,
            )
            if config.training_phases == "2":
                self.staging = self.phase2_staging
        stagings: list[DatasetStaging | DatasetPreparation] = [self.staging]
        if self.phase2_staging is not None and self.phase2_staging is not self.staging:
            stagings.append(self.phase2_staging)
        self.heldout_stagings = _heldout_stagings(self, config, dataset, stagings, on_dataset_node)


def _heldout_stagings(
    scope: Construct,
    config: PlatformConfig,
    dataset: DatasetJobProps,
    stagings: Sequence[DatasetStaging | DatasetPreparation],
    on_dataset_node: bool,
) -> tuple[HeldOutStaging, ...]:
    """The held-out set of each phase that has one (``spec.eval_dir``: ``heldout_enabled``), made
    once the phase's shards (``stagings``, in the phases' order) and their vocabulary are there. The
    training pods do not wait for it; its own wait is bounded by its shards' deadline (phase 2's
    of ``training_phases=both``: phase 1's staging, then phase 2's)."""
    made = []
    first = first_data_deadline(config)
    for index, (spec, staging) in enumerate(zip(config.phase_jobs, stagings, strict=True)):
        phase2 = index == 1 or config.training_phases == "2"
        if spec.eval_dir is None or spec.vocab is None:
            continue
        deadline = first
        if phase2 and config.training_phases == "both":
            later = phase2_data_deadline(config)
            deadline = Deadline(
                first.seconds + later.seconds, f"phase 1's shards: {first.why}; then phase 2's: {later.why}"
            )
        props: DatasetJobProps = {
            **dataset,
            "paths": spec.paths,
            "depends_on": [*dataset["depends_on"], staging.manifest],
        }
        made.append(
            HeldOutStaging(
                scope,
                "Phase2HeldOutStaging" if phase2 else "HeldOutStaging",
                **props,
                vocab=spec.vocab,
                shape=phase_shape(spec),
                samples=eval_samples(spec),
                on_dataset_node=on_dataset_node,
                waits=(_staged(staging, deadline, f"phase {2 if phase2 else 1}'s shards"),),
            )
        )
    return tuple(made)


@dataclass(frozen=True)
class JobWaits:
    """What the job waits for: its submitter, before it asks for nodes; its pods, per phase."""

    submitter: tuple[Wait, ...]
    phases: tuple[tuple[Wait, ...] | None, ...]


def _staged(staging: DatasetStaging | DatasetPreparation, deadline: Deadline, what: str = "") -> Wait:
    """The wait for ``staging``'s shard set: its marker, or its failed marker (a staging Job's)."""
    paths = staging.paths
    failed = isinstance(staging, DatasetStaging)
    return Wait(
        what=what or f"the shards of {paths.data_dir}",
        ready=paths.dataset_marker,
        deadline_s=deadline.seconds,
        why=deadline.why,
        failed=paths.dataset_failed if failed else None,
        failed_by=staging.job_name if failed else None,
    )


def _job_waits(
    config: PlatformConfig,
    staging: DatasetStaging | DatasetPreparation,
    phase2_staging: DatasetStaging | None,
) -> JobWaits:
    """The submitter waits for the first phase's shards (staged and verified; for phase 2 alone,
    its start imported too); the pods then find them there, and with both phases wait for phase
    2's shards, which their staging brings during phase 1."""
    first = _staged(staging, first_data_deadline(config), "the first phase's shards")
    there = Deadline(DATA_ALREADY_STAGED_S, "the job is submitted once its shards are staged")
    pods: list[tuple[Wait, ...] | None] = [(_staged(staging, there, "phase 1's dataset"),)]
    if config.training_phases == "2":
        pods = [(_staged(staging, there, "phase 2's dataset and start"),)]
    elif phase2_staging is not None:
        pods.append((_staged(phase2_staging, phase2_data_deadline(config), "phase 2's dataset"),))
    return JobWaits(submitter=(first,), phases=tuple(pods))


def _pretraining_job(
    scope: Construct,
    *,
    target: WorkloadTarget,
    config: PlatformConfig,
    images: TrainingImages,
    waits: JobWaits,
    depends_on: Sequence[IConstruct],
) -> BertPretrainingJob:
    """The one place where the job settings become the job construct's arguments."""
    return BertPretrainingJob(
        scope,
        "Training",
        cluster=require_cluster(target.cluster, "WorkloadTarget.cluster"),
        facts=config.facts,
        nodes=config.desired_nodes,
        max_nodes=config.max_nodes,
        image=images.training_image,
        image_key=images.training_tag,
        namespace=target.namespace,
        claim_name=target.claim_name,
        queue=target.queue_name,
        spec=config.phases,
        etcd_endpoint=target.etcd_endpoint,
        name_prefix=config.name_prefix,
        node_reserved=node_fit(config).reserved,
        gang_wait_minutes=config.gang_wait_minutes,
        health_gate=config.trainium_health_check and config.trainium_capacity == "nodegroup",
        fabric_heal=_fabric_heal(config),
        phase_waits=waits.phases,
        budget=_budget(config),
        submit_image=images.tensorboard_image,
        submit_image_key=images.tensorboard_tag,
        model_bucket_name=target.model_bucket_name,
        submit_waits=waits.submitter,
        depends_on=depends_on,
    )


def _budget(config: PlatformConfig) -> Budget | None:
    """The pods' spend ceiling (none without a price or a derivable default)."""
    ceiling = job_ceiling(config)
    price = config.facts.on_demand_usd_per_hour
    if ceiling.usd is None or price is None:
        return None
    return Budget(
        usd=float(ceiling.usd),
        usd_per_node_hour=price,
        spend_dir=spend_dir(config.phase_jobs[0].run_name),
        node_start_s=int(node_start_minutes(config) * 60),
    )


def _fabric_heal(config: PlatformConfig) -> FabricHeal | None:
    """With the deep node health check on, a node the fabric check names is taken out (and
    replaced when the check replaces), and the job restarts without it."""
    if not config.trainium_health_check:
        return None
    return FabricHeal(
        mode="replace" if config.trainium_health_replace else "taint",
        recheck=config.trainium_capacity == "nodegroup",
    )
