"""Any training program as a gang of Trainium pods: the Volcano Job every job of the library is.

What a job trains is its description (:mod:`trainium_job.pod_program`): the commands of its
phases, their waits, precompile, fabric check, exports and spend ceiling. What every job's pods
share is here: one pod per node with all of its Neuron devices and EFA interfaces, the FSx claim,
the environment EFA and Neuron read, the security contexts, the grace period, the metrics ports,
Karpenter's do-not-disrupt annotation, the health gate, and the Volcano Job around them (gang,
restart and abort policies, the gang wait). The BERT job (:func:`trainium_job.job.render_job`)
and a job of a user's own program (``trainium_eks.TrainiumTrainingJob``) render through it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from . import checks
from .allocatable import DEFAULT_NODE_DAEMONS, Resources
from .instances import InstanceFacts
from .launch import LaunchSpec
from .naming import content_named, max_name_prefix
from .pod import pod_template, volcano_job
from .pod_program.description import JobDescription
from .scheduling import DO_NOT_DISRUPT_ANNOTATION
from .submission import SUBMISSION_ANNOTATION

#: Service account of the training pods (no AWS role, no Kubernetes API token).
SERVICE_ACCOUNT = "bert-trainer"


@dataclass(frozen=True)
class Gang:
    """Where a job's pods run and what they are given, whatever they train.

    Attributes:
        facts: the Trainium instance type's facts row (devices, EFA, allocatable).
        nodes: pods (= nodes) of the job.
        image: the training image URI (may be a token at synth).
        image_key: a plain string identifying ``image`` (its tag): the job's name hashes it.
        name_prefix: the job is named ``<name_prefix>-<8 hex of its content>``.
        namespace, queue, claim_name: the training namespace, the Volcano queue, the FSx claim
            (mounted at /data).
        service_account: the pods' ServiceAccount. Default :data:`SERVICE_ACCOUNT`.
        node_reserved: what each pod leaves of its node for others. Default
            ``DEFAULT_NODE_DAEMONS``.
        gang_wait_minutes: nodes launched per job (Karpenter): do-not-disrupt, and the gang aborted
            after that many minutes pending. Default None: a fixed nodegroup.
        node_labels: labels the pods' nodes must also carry (the health gate). Default None.
        max_retry: Volcano restarts of the whole job. Default 3.
        env: the container's own variables, over the platform's. Default none.
        app_name: the ``app.kubernetes.io/name`` label of the Job and its pods (the PodMonitor,
            the NetworkPolicy and the alerts select it). Default "bert-pretrain".
        runtime_image: an image holding the library's own programs (the tools image), for a
            training image that does not: an init container copies them to
            ``trainium_job.pod.RUNTIME_DIR`` and the pod program runs from there. Default None:
            the training image holds them (the library's own training image).
        runtime_image_key: a plain string identifying ``runtime_image`` (its tag), as
            ``image_key`` does ``image``. Default None: ``runtime_image`` itself (a plain URI).
        submission: the key of the submitter that creates the job
            (:func:`trainium_job.submission.submission_key`), carried as the Job's annotation so
            that its name changes with its submitter. Default None: the job is applied as it is.
    """

    facts: InstanceFacts
    nodes: int
    image: str
    image_key: str
    name_prefix: str
    namespace: str
    queue: str
    claim_name: str
    service_account: str = SERVICE_ACCOUNT
    node_reserved: Resources = DEFAULT_NODE_DAEMONS
    gang_wait_minutes: int | None = None
    node_labels: Mapping[str, str] | None = None
    max_retry: int = 3
    env: tuple[tuple[str, str], ...] = field(default=())
    app_name: str = "bert-pretrain"
    runtime_image: str | None = None
    runtime_image_key: str | None = None
    submission: str | None = None


@dataclass(frozen=True)
class RenderedJob:
    """A rendered job: its name, the digest of its spec, torchrun's spec, the manifest and the
    description its pods run (in the manifest's container command)."""

    name: str
    digest: str
    launch: LaunchSpec
    manifest: dict[str, Any]
    description: JobDescription


def gang_pod(
    gang: Gang, *, job_name: str, launch: LaunchSpec, description: JobDescription, draft: bool = False
) -> dict[str, Any]:
    """The pod template of every node of ``gang``'s job ``job_name``: it runs ``description``;
    ``launch`` is its first phase's torchrun (for the container's environment). ``draft``: with
    the images' keys for their URIs (the draft a job's name is hashed from)."""
    runtime_image = gang.runtime_image
    if draft and gang.runtime_image_key is not None:
        runtime_image = gang.runtime_image_key
    return pod_template(
        job_name=job_name,
        image=gang.image_key if draft else gang.image,
        facts=gang.facts,
        spec=launch,
        description=description,
        claim_name=gang.claim_name,
        service_account=gang.service_account,
        node_reserved=gang.node_reserved,
        annotations={DO_NOT_DISRUPT_ANNOTATION: "true"} if gang.gang_wait_minutes is not None else None,
        node_labels=gang.node_labels,
        env=gang.env,
        app_name=gang.app_name,
        runtime_image=runtime_image,
    )


def render_gang(
    gang: Gang,
    *,
    launch: Callable[[str], LaunchSpec],
    describe: Callable[[str], JobDescription],
) -> RenderedJob:
    """The Volcano Job of ``gang``, named after its content (``launch`` and ``describe`` give the
    first phase's torchrun spec and the description for a job name: the name appears in both)."""
    checks.dns_label("name_prefix", gang.name_prefix, max_len=max_name_prefix(gang.nodes))

    def build(job_name: str, draft: bool) -> dict[str, Any]:
        template = gang_pod(
            gang, job_name=job_name, launch=launch(job_name), description=describe(job_name), draft=draft
        )
        return volcano_job(
            job_name=job_name,
            namespace=gang.namespace,
            queue=gang.queue,
            nodes=gang.nodes,
            max_retry=gang.max_retry,
            template=template,
            gang_wait_minutes=gang.gang_wait_minutes,
            app_name=gang.app_name,
            annotations={SUBMISSION_ANNOTATION: gang.submission} if gang.submission else None,
        )

    name, digest, manifest = content_named(gang.name_prefix, build)
    return RenderedJob(
        name=name, digest=digest, launch=launch(name), manifest=manifest, description=describe(name)
    )
