"""The BERT pretraining job: a gang-scheduled Volcano Job, one pod per Trainium node."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import CfnOutput, Token
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct, IConstruct

from trainium_job import checks
from trainium_job.allocatable import DEFAULT_NODE_DAEMONS, Resources
from trainium_job.gang import Gang
from trainium_job.instances import InstanceFacts
from trainium_job.job import SERVICE_ACCOUNT, FabricHeal, RenderedJob, phase_plan, render_job
from trainium_job.naming import DEFAULT_NAME_PREFIX
from trainium_job.node_health import HEALTH_LABEL, PASSED
from trainium_job.paths import JobPaths
from trainium_job.phases import TrainingPhases, as_phases
from trainium_job.plan import plan_training
from trainium_job.pod_program.description import Budget
from trainium_job.scheduling import TRAINING_NAMESPACE, TRAINING_QUEUE
from trainium_job.spec import BertJobSpec
from trainium_job.submission import submission_key
from trainium_job.waits import Wait

from ..arguments import AnyCluster, require_cluster
from .job_submission import JobSubmission
from .model_writer import ModelWriter
from .trainium_training_job import apply_gang, image_key_of, service_account
from .trainium_training_job import job_outputs as job_commands

__all__ = [
    "BertPretrainingJob",
    "add_job_outputs",
    "job_commands",
]


class BertPretrainingJob(Construct):
    """BERT pretraining on the Trainium nodegroup, as a Volcano Job applied by the stack.

    What runs is a :class:`~trainium_job.spec.BertJobSpec` (model, batch, schedule, launcher,
    names; its defaults are the reference recipe); this construct adds where it runs: the
    cluster, the nodes, the image, the claim and the queue.

    The Volcano Job's name is ``<name_prefix>-<8 hex of its spec>`` and its construct id carries
    the same digest: a changed spec creates a new job and deletes the old one in the same
    deployment (pod templates are immutable), an unchanged spec leaves a running job alone.
    Training state is not tied to the name: ``spec.run_name`` picks the output directory, so a
    new job with a changed, compatible spec (e.g. more restarts) resumes from the old checkpoints.

    Attributes:
        phases (:class:`~trainium_job.phases.TrainingPhases`), spec (the first phase's), job_name,
        plan (:class:`~trainium_job.plan.TrainingPlan`, the first phase's), plans (each phase's), launch_spec, paths
        (the first phase's), service_account,
        manifest (the job's ``KubernetesManifest``), job (the Volcano Job as a dict).

    Args:
        cluster: the EKS cluster (with a kubectl provider).
        facts: the Trainium instance type's facts row.
        nodes: pods (= nodes) of the job. max_nodes: the nodegroup's maximum (checked).
        image: training image URI (the platform's ECR repository).
        claim_name: the FSx claim (mounted at /data).
        spec: what to train. Default ``BertJobSpec()``: the reference recipe's phase 1. A
            :class:`~trainium_job.phases.TrainingPhases` runs its phases in turn in the
            same pods (phase 1, then phase 2 from it; ``trainium_job.worker.phases_script``).
        image_key: a plain string that identifies the image (its content-hash tag), used
            for the job name when ``image`` is a token. Default: ``image`` itself.
        namespace: the training namespace. Default ``TRAINING_NAMESPACE`` ("training").
        queue: Volcano queue. Default ``TRAINING_QUEUE`` ("training").
        etcd_endpoint: ``host:port`` of the etcd add-on, for an etcd rendezvous. Default None.
        name_prefix: prefix of the job name (<= 45 characters). Default
            ``DEFAULT_NAME_PREFIX`` ("trn-bert").
        service_account_name: created in ``namespace``, with no AWS role. Default "bert-trainer".
        node_reserved: what each pod leaves of its node's allocatable for other pods (its
            DaemonSets, a dataset pod beside the gang); the pod takes the rest less a margin
            (``trainium_job.allocatable``). Default ``DEFAULT_NODE_DAEMONS``: the DaemonSets of
            a platform with default settings. ``TrainingWorkload`` passes its configuration's.
        gang_wait_minutes: the Trainium nodes are launched per job (Karpenter): minutes the
            gang may wait for all its nodes before the job is aborted and the nodes that came
            are released (``trainium_job.job.render_job``). Default None: a fixed nodegroup.
        health_gate: the pods require nodes labelled ``trainium-eks/node-health=passed`` by
            the node health check (:mod:`trainium_eks.nodes.health_checks`). Only for a managed
            nodegroup: Karpenter launches no node for a pod that requires a custom label
            its NodePool does not define (kubernetes-sigs/karpenter v1.14.1
            pkg/scheduling/requirements.go L182-193), so there the startup taint is the
            gate. Default False.
        fabric_heal: what the pre-training fabric check does to a node it names
            (:class:`trainium_job.job.FabricHeal`). Default None: nothing, the job aborts.
        phase_waits: per phase, what its pods wait for before it trains, each bounded
            (:class:`trainium_job.waits.Wait`). Default None: each phase's dataset marker, for
            ``trainium_job.worker.DATA_ALREADY_STAGED_S``.
        budget: the job's spend ceiling (:class:`trainium_job.pod_program.Budget`). Default
            None: none.
        submit_image: the tools image: the job is submitted by a batch Job on the system nodes
            once ``submit_waits`` are over (:class:`~trainium_eks.jobs.job_submission.JobSubmission`),
            so that no Trainium node is asked for before its data. Default None: the Volcano Job
            is applied as it is, its pods waiting on their nodes.
        submit_waits: what the submitter waits for, each bounded. Default ``()``.
        model_bucket_name: the bucket each phase's exported model is uploaded to, under
            ``<run>/model/`` (``TrainiumPlatform.model_bucket``; another stack's by its
            ``WorkloadModelBucketName`` output): the job's ServiceAccount gets a Pod Identity role
            that may write those prefixes only, and the pods read the name from a ConfigMap
            (:data:`trainium_job.paths.MODEL_BUCKET_CONFIG_MAP`, one per namespace). Default None:
            the models stay on FSx.
        submit_image_key: the tools image's tag: the job's name hashes it with ``submit_waits``
            (a changed submitter submits a job of a new name, :func:`trainium_job.submission.submission_key`).
            Default None: ``submit_image`` itself, which must then be a plain string.
        depends_on: constructs applied first (Volcano chart and queue, the claim). Default
            ``()``.

    Attributes (also): submission (the :class:`JobSubmission`, or None), description (what
    every pod runs, :class:`trainium_job.pod_program.JobDescription`).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: AnyCluster,
        facts: InstanceFacts,
        nodes: int,
        max_nodes: int,
        image: str,
        claim_name: str,
        spec: BertJobSpec | TrainingPhases | None = None,
        image_key: str | None = None,
        namespace: str = TRAINING_NAMESPACE,
        queue: str = TRAINING_QUEUE,
        etcd_endpoint: str | None = None,
        name_prefix: str = DEFAULT_NAME_PREFIX,
        service_account_name: str = SERVICE_ACCOUNT,
        node_reserved: Resources = DEFAULT_NODE_DAEMONS,
        gang_wait_minutes: int | None = None,
        health_gate: bool = False,
        fabric_heal: FabricHeal | None = None,
        phase_waits: Sequence[tuple[Wait, ...] | None] | None = None,
        budget: Budget | None = None,
        submit_image: str | None = None,
        submit_waits: Sequence[Wait] = (),
        submit_image_key: str | None = None,
        model_bucket_name: str | None = None,
        depends_on: Sequence[IConstruct] = (),
    ) -> None:
        super().__init__(scope, id)
        cluster = require_cluster(cluster)
        self.phases = as_phases(BertJobSpec() if spec is None else spec)
        self.spec = spec = self.phases.first
        _check_names(namespace=namespace, queue=queue, service_account_name=service_account_name)
        self.plan = plan_training(spec, facts=facts, nodes=nodes, max_nodes=max_nodes)
        #: Each phase's plan, in order (the first is :attr:`plan`).
        self.plans = [self.plan, *(phase_plan(self.plan, later) for later in self.phases.phases[1:])]
        self.paths: JobPaths = spec.paths
        self.service_account = service_account_name

        gang = Gang(
            facts=facts,
            nodes=self.plan.nodes,
            image=image,
            image_key=image_key_of("image_key", image, image_key),
            name_prefix=name_prefix,
            namespace=namespace,
            queue=queue,
            claim_name=claim_name,
            service_account=service_account_name,
            node_reserved=node_reserved,
            gang_wait_minutes=gang_wait_minutes,
            node_labels={HEALTH_LABEL: PASSED} if health_gate else None,
            submission=_submission(submit_image, submit_image_key, submit_waits),
        )
        rendered = render_job(
            self.phases,
            plan=self.plan,
            gang=gang,
            etcd_endpoint=etcd_endpoint,
            fabric_heal=fabric_heal,
            waits=phase_waits,
            budget=budget,
            upload_models=model_bucket_name is not None,
        )
        self.job_name, self.launch_spec = rendered.name, rendered.launch
        self.job, self.description = rendered.manifest, rendered.description
        self.submission: JobSubmission | None = None
        #: The model bucket's writer role and the ConfigMap naming the bucket (None without one).
        self.model_writer = self._model_writer(cluster, model_bucket_name, namespace)
        writer = [self.model_writer.config_map] if self.model_writer is not None else []
        self._apply(
            cluster,
            rendered,
            namespace=namespace,
            claim_name=claim_name,
            submit=(submit_image, tuple(submit_waits)),
            depends_on=[*depends_on, *writer],
        )

    def _model_writer(
        self, cluster: eks.ICluster, bucket_name: str | None, namespace: str
    ) -> ModelWriter | None:
        if bucket_name is None:
            return None
        return ModelWriter(
            self,
            "ModelWriter",
            cluster=cluster,
            bucket_name=bucket_name,
            namespace=namespace,
            service_account=self.service_account,
            runs=[phase.run_name for phase in self.phases.phases],
        )

    def _apply(
        self,
        cluster: eks.ICluster,
        rendered: RenderedJob,
        *,
        namespace: str,
        claim_name: str,
        submit: tuple[str | None, tuple[Wait, ...]],
        depends_on: Sequence[IConstruct],
    ) -> None:
        """The service account, then the job (its submitter, or the Volcano Job named after its
        digest), both after ``depends_on``: as any job of the library (:func:`apply_gang`)."""
        sa = service_account(self, cluster, name=self.service_account, namespace=namespace)
        self.service_account_manifest = sa
        image, waits = submit
        self.manifest, self.submission = apply_gang(
            self,
            cluster,
            rendered,
            namespace=namespace,
            claim_name=claim_name,
            service_account_manifest=sa,
            submit_image=image,
            submit_waits=waits,
            depends_on=depends_on,
        )


def _submission(image: str | None, image_key: str | None, waits: Sequence[Wait]) -> str | None:
    """The key of the job's submitter (:func:`trainium_job.submission.submission_key`), if any."""
    if image is None:
        return None
    return submission_key(tuple(waits), image_key_of("submit_image_key", image, image_key))


def _check_names(**names: str) -> None:
    """Each name a DNS label (a token is checked where it resolves)."""
    for name, value in names.items():
        if not Token.is_unresolved(value):
            checks.dns_label(name, value)


def add_job_outputs(scope: Construct, *, job: BertPretrainingJob, namespace: str) -> None:
    """CfnOutputs with the exact watch commands."""
    for key, command in job_commands(job_name=job.job_name, namespace=namespace).items():
        CfnOutput(scope, key, value=command, description=f"{key} of the training job")
