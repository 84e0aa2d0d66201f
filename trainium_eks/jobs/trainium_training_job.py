"""Your own training program on Trainium, run the way the library runs BERT: a gang of pods, one per
node, each with all of its node's Neuron devices and EFA interfaces, FSx at /data, running the pod
program (:mod:`trainium_job.pod_program`) around your command; submitted once its data is there.

What it is (:class:`~trainium_job.program_job.ProgramJobSpec`: your command, run directory,
precompile and cache set, waits, fabric check, restarts, environment) is rendered by
:func:`trainium_job.program_job.render_program_job` into the same Volcano Job the BERT job is
(:mod:`trainium_job.gang`); :func:`apply_gang` applies either: its ServiceAccount, then its
submitter (:class:`~trainium_eks.jobs.job_submission.JobSubmission`) or the Volcano Job itself.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from aws_cdk import CfnOutput, Token
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct, IConstruct

from trainium_job import checks
from trainium_job.allocatable import DEFAULT_NODE_DAEMONS, Resources
from trainium_job.errors import ConfigError
from trainium_job.gang import Gang, RenderedJob
from trainium_job.instances import InstanceFacts
from trainium_job.naming import DEFAULT_NAME_PREFIX, pod_host_name
from trainium_job.node_health import HEALTH_LABEL, PASSED
from trainium_job.program_job import (
    JOB_SERVICE_ACCOUNT,
    ProgramJobSpec,
    check_nodes,
    program_budget,
    render_program_job,
)
from trainium_job.scheduling import TRAINING_NAMESPACE, TRAINING_QUEUE
from trainium_job.submission import submission_key
from trainium_job.waits import Wait

from ..arguments import AnyCluster, require_cluster
from ..images.directory_image import DirectoryImage
from ..images.training_image import ToolsImage
from ..nodes.gang_wait import gang_wait_floor
from .job_submission import JobSubmission

_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


@dataclass(frozen=True)
class JobImage:
    """The training image of a job: a URI by digest, or a folder of your app built in the region.

    Use :meth:`from_uri` or :meth:`from_directory`. Attributes: uri, key (a plain string naming
    it, for the job's name), builds (apply the job after them), has_library (the image holds the
    library's packages: the library's own training image; else its pods get them from the tools
    image).
    """

    uri: str
    key: str
    builds: tuple[IConstruct, ...] = field(default=())
    has_library: bool = False

    @classmethod
    def from_uri(cls, uri: str) -> JobImage:
        """An image already in a registry the nodes can pull, pinned by digest (``...@sha256:<64 hex>``):
        a tag can move, and the job's name must change when its image does."""
        if not isinstance(uri, str) or Token.is_unresolved(uri) or not _DIGEST.search(uri):
            raise ConfigError("image", uri, "give the image URI by digest: <repository>@sha256:<64 hex>")
        return cls(uri=uri, key=uri)

    @classmethod
    def from_directory(
        cls,
        scope: Construct,
        id: str,
        *,
        directory: str | Path,
        repository: ecr.IRepository,
        dockerfile: str = "Dockerfile",
    ) -> JobImage:
        """``directory`` built with its Dockerfile in the region (CodeBuild, no local Docker) into
        ``repository``, as :class:`~trainium_eks.images.directory_image.DirectoryImage` does."""
        image = DirectoryImage(scope, id, directory=directory, repository=repository, dockerfile=dockerfile)
        return cls(uri=image.image, key=image.tag, builds=tuple(image.builds))


def job_outputs(*, job_name: str, namespace: str) -> dict[str, str]:
    """The commands a user types to watch a job (also the stack's outputs)."""
    pod0 = pod_host_name(job_name, 0)
    return {
        "Rank0Logs": f"kubectl logs -n {namespace} -f {pod0}",
        "JobStatus": f"kubectl get vcjob -n {namespace} {job_name} -o wide",
        "NeuronTop": f"kubectl exec -n {namespace} -it {pod0} -- neuron-top",
    }


def image_key_of(field: str, image: str, key: str | None) -> str:
    """The plain string a job's name hashes for ``image``: ``key``, else ``image`` without a token
    (a token's number changes between two synths of the same app)."""
    if key is not None:
        return key
    if Token.is_unresolved(image):
        raise ConfigError(
            field,
            None,
            "give the image's tag when its URI is a token (the job name must not depend on token numbering)",
        )
    return image


def service_account(
    scope: Construct, cluster: eks.ICluster, *, name: str, namespace: str
) -> eks.KubernetesManifest:
    """The job pods' ServiceAccount: no token unless a pod asks (its fabric check marks a node it
    names: trainium_job.pod), no AWS role."""
    return eks.KubernetesManifest(
        scope,
        "ServiceAccount",
        cluster=cluster,
        manifest=[
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": name, "namespace": namespace},
                "automountServiceAccountToken": False,
            }
        ],
    )


def apply_gang(
    scope: Construct,
    cluster: eks.ICluster,
    rendered: RenderedJob,
    *,
    namespace: str,
    claim_name: str,
    service_account_manifest: eks.KubernetesManifest,
    submit_image: str | None,
    submit_waits: Sequence[Wait],
    depends_on: Sequence[IConstruct],
) -> tuple[eks.KubernetesManifest, JobSubmission | None]:
    """The job (named after its digest), after its ServiceAccount and ``depends_on``: through its
    submitter with ``submit_image`` (the gang asks for no node before ``submit_waits`` are over),
    else applied as it is. Returns what waits for the job (the submitter's Job or the Volcano
    Job) and the submission, if any."""
    for dependency in depends_on:
        service_account_manifest.node.add_dependency(dependency)
    if submit_image is not None:
        submission = JobSubmission(
            scope,
            "Submission",
            cluster=cluster,
            namespace=namespace,
            job_name=rendered.name,
            digest=rendered.digest,
            job=rendered.manifest,
            image=submit_image,
            claim_name=claim_name,
            waits=submit_waits,
            budget=rendered.description.budget,
            depends_on=[service_account_manifest, *depends_on],
        )
        return submission.manifest, submission
    manifest = eks.KubernetesManifest(
        scope, f"Job{rendered.digest}", cluster=cluster, manifest=[rendered.manifest]
    )
    manifest.node.add_dependency(service_account_manifest, *depends_on)
    return manifest, None


class TrainiumTrainingJob(Construct):
    """Your own training program on ``nodes`` Trainium nodes, with everything the BERT job gets.

    Args:
        cluster: the EKS cluster (with a kubectl provider), whose Volcano, FSx claim and Trainium
            capacity the platform installs (``TrainiumPlatform.workload_target``).
        facts: the Trainium instance type's facts row (``instance_facts("trn1.32xlarge")``): the
            devices and EFA interfaces each pod takes, the workers per node.
        nodes: pods (= nodes) of the job, 1 or more. max_nodes: at most this many (the
            platform's). Default ``nodes``.
        spec: what runs (:class:`~trainium_job.program_job.ProgramJobSpec`).
        image: the training image (:class:`JobImage`).
        claim_name: the FSx claim, mounted at /data.
        repository: where the tools image is built when ``tools_image`` is not given (the
            platform's repository). Default None.
        tools_image: the library's tools image (its submitter, and the library's programs an init
            container copies into pods whose image lacks them). Default None: built into
            ``repository``.
        namespace, queue: default ``TRAINING_NAMESPACE``, ``TRAINING_QUEUE`` ("training").
        name_prefix: the job is named ``<prefix>-<8 hex of its content>``. Default
            :data:`~trainium_job.naming.DEFAULT_NAME_PREFIX` ("trn-bert"), as every construct's.
        service_account_name: created in ``namespace``. Default "trainium-job".
        node_reserved: what each pod leaves of its node for other pods. Default the default
            platform's DaemonSets.
        gang_wait_minutes: the nodes are launched per job (Karpenter): do-not-disrupt, and a gang
            not running after that long is aborted. Default None: a fixed nodegroup.
        health_gate: the pods require nodes the node health check passed (a managed nodegroup).
            Default False.
        budget_usd: the job's spend ceiling, USD (its pods count node-hours at the list price and
            stop at it: your program gets SIGTERM and should checkpoint). Default None: none.
        submit_waits: what the job's submitter waits for before it creates the job (your data's
            marker), each bounded. Default none.
        etcd_endpoint: for an etcd rendezvous. Default None.
        depends_on: constructs applied first (Volcano's chart and queue, the claim). Default ``()``.

    Attributes: spec, job_name, description (what every pod runs), job (the Volcano Job),
    manifest (what waits for the job), submission, tools_image, service_account.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: AnyCluster,
        facts: InstanceFacts,
        nodes: int,
        spec: ProgramJobSpec,
        image: JobImage,
        claim_name: str,
        max_nodes: int | None = None,
        repository: ecr.IRepository | None = None,
        tools_image: str | None = None,
        namespace: str = TRAINING_NAMESPACE,
        queue: str = TRAINING_QUEUE,
        name_prefix: str = DEFAULT_NAME_PREFIX,
        service_account_name: str = JOB_SERVICE_ACCOUNT,
        node_reserved: Resources = DEFAULT_NODE_DAEMONS,
        gang_wait_minutes: int | None = None,
        health_gate: bool = False,
        budget_usd: int | None = None,
        submit_waits: Sequence[Wait] = (),
        etcd_endpoint: str | None = None,
        depends_on: Sequence[IConstruct] = (),
    ) -> None:
        super().__init__(scope, id)
        eks_cluster = require_cluster(cluster)
        _check_props(facts, nodes, max_nodes, spec, image)
        for name, value in (
            ("namespace", namespace),
            ("queue", queue),
            ("service_account_name", service_account_name),
        ):
            if not Token.is_unresolved(value):
                checks.dns_label(name, value)
        self.spec = spec
        self._tools_builds: list[IConstruct] = []
        self.tools_image, tools_key = (
            (tools_image, image_key_of("tools_image", tools_image, None))
            if tools_image
            else self._tools_image(repository)
        )
        gang = Gang(
            facts=facts,
            nodes=nodes,
            image=image.uri,
            image_key=image.key,
            name_prefix=name_prefix,
            namespace=namespace,
            queue=queue,
            claim_name=claim_name,
            service_account=service_account_name,
            node_reserved=node_reserved,
            gang_wait_minutes=gang_wait_minutes,
            node_labels={HEALTH_LABEL: PASSED} if health_gate else None,
            max_retry=spec.max_retry,
            app_name=name_prefix,
            runtime_image=None if image.has_library else self.tools_image,
            runtime_image_key=None if image.has_library else tools_key,
            submission=submission_key(tuple(submit_waits), tools_key),
        )
        budget = program_budget(spec, facts, budget_usd, node_start_s=_node_start_s(facts))
        rendered = render_program_job(spec, gang, budget=budget, etcd_endpoint=etcd_endpoint)
        self.job_name, self.job, self.description = rendered.name, rendered.manifest, rendered.description
        self.service_account = service_account_name
        sa = service_account(self, eks_cluster, name=service_account_name, namespace=namespace)
        self.manifest, self.submission = apply_gang(
            self,
            eks_cluster,
            rendered,
            namespace=namespace,
            claim_name=claim_name,
            service_account_manifest=sa,
            submit_image=self.tools_image,
            submit_waits=submit_waits,
            depends_on=[*depends_on, *image.builds, *self._tools_builds],
        )
        for key, command in job_outputs(job_name=self.job_name, namespace=namespace).items():
            CfnOutput(self, key, value=command, description=f"{key} of the training job")

    def _tools_image(self, repository: ecr.IRepository | None) -> tuple[str, str]:
        """The tools image built into ``repository``: (its URI, its tag)."""
        if repository is None:
            raise ConfigError(
                "repository", None, "give the ECR repository the tools image is built into, or tools_image"
            )
        tools = ToolsImage(self, "ToolsImage", repository=repository)
        self._tools_builds = list(tools.builds)
        return tools.image, tools.tag


def _check_props(
    facts: InstanceFacts,
    nodes: int,
    max_nodes: int | None,
    spec: ProgramJobSpec,
    image: JobImage,
) -> None:
    """The props no dataclass checked: types, counts."""
    if not isinstance(facts, InstanceFacts):
        raise ConfigError(
            "facts", facts, 'give instance_facts("trn1.32xlarge") (trainium_job.instance_facts)'
        )
    check_nodes(facts, nodes)
    if max_nodes is not None:
        checks.whole_number("max_nodes", max_nodes, minimum=nodes)
    if not isinstance(spec, ProgramJobSpec):
        raise ConfigError("spec", spec, "give a ProgramJobSpec(command=TrainingCommand(...), run_name=...)")
    if not isinstance(image, JobImage):
        raise ConfigError("image", image, "give JobImage.from_uri(...) or JobImage.from_directory(...)")


def _node_start_s(facts: InstanceFacts) -> int:
    """What a node bills before its pod starts, for the spend ceiling: the gang wait's floor."""
    return int(gang_wait_floor(facts, health_check=True).minutes * 60)
