"""The BERT pretraining job: a gang-scheduled Volcano Job, one pod per Trainium node."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aws_cdk import CfnOutput, Token
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct, IConstruct

from training.job_spec import (
    RESTART_POLICIES,
    TASK_NAME,
    JobPaths,
    compute_resources,
    container_command,
    container_env,
    device_limits,
    job_paths,
    pod_security_context,
    rank0_endpoint,
    termination_grace_period_s,
    training_security_context,
    volume_mounts,
    volumes,
)
from training.launch import LaunchSpec, script_args_from_dict

from .errors import ConfigError
from .instance_types import InstanceFacts
from .job_naming import MAX_LABEL, hashed_name, is_dns1123_label, spec_digest
from .nodegroup import TRAINIUM_NODE_LABEL, TRAINIUM_TOLERATION

VOLCANO_API = "batch.volcano.sh/v1alpha1"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
RDZV_BACKENDS = ("c10d", "etcd", "etcd-v2")
MODELS = ("large", "base", "tiny")
#: The reference recipe (BERT-large phase 1, AdamW): global batch 16,384, 28,125 steps.
DEFAULT_GLOBAL_BATCH = 16384
DEFAULT_MAX_STEPS = 28125


@dataclass(frozen=True)
class TrainingPlan:
    """What a job spec works out to: workers and accumulation (validated, no CDK involved).

    ``grad_accum_usteps = global_batch / (batch_size x workers)``; the reference's 2 x
    trn1.32xlarge recipe: 64 workers, 16 x 64 x 16 = 16,384.
    """

    nodes: int
    nproc_per_node: int
    batch_size: int
    global_batch: int

    @property
    def workers(self) -> int:
        return self.nodes * self.nproc_per_node

    @property
    def grad_accum_usteps(self) -> int:
        return self.global_batch // (self.batch_size * self.workers)


def plan_training(
    *,
    facts: InstanceFacts,
    nodes: int,
    max_nodes: int,
    nproc_per_node: int | None,
    batch_size: int,
    global_batch: int,
) -> TrainingPlan:
    """Resolve ``nproc_per_node`` and check the shape; ConfigError naming the prop otherwise."""
    nproc = facts.neuron_cores if nproc_per_node is None else nproc_per_node
    for name, value in (
        ("nodes", nodes),
        ("nproc_per_node", nproc),
        ("batch_size", batch_size),
        ("global_batch", global_batch),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(name, value, "must be a whole number of at least 1")
    if nproc > facts.neuron_cores:
        raise ConfigError(
            "nproc_per_node", nproc, f"{facts.name} has {facts.neuron_cores} NeuronCores; use at most that"
        )
    if nodes > max_nodes:
        raise ConfigError(
            "nodes", nodes, f"the Trainium nodegroup's maximum is {max_nodes}; raise max_nodes or use fewer"
        )
    if nodes > 1 and not facts.multi_node:
        raise ConfigError(
            "nodes",
            nodes,
            f"{facts.name} has no EFA for multi-node training; use 1 node or a 32xlarge/48xlarge type",
        )
    plan = TrainingPlan(nodes, nproc, batch_size, global_batch)
    if global_batch % (batch_size * plan.workers):
        raise ConfigError(
            "global_batch",
            global_batch,
            f"must be a multiple of batch_size x workers = {batch_size} x {plan.workers} "
            f"= {batch_size * plan.workers} (gradient accumulation is a whole number)",
        )
    return plan


def _check_label(field: str, value: str, *, max_len: int = MAX_LABEL) -> None:
    if not isinstance(value, str) or not is_dns1123_label(value) or len(value) > max_len:
        raise ConfigError(
            field, value, f"use at most {max_len} lower-case letters, digits or '-' (a DNS-1123 label)"
        )


def pod_template(
    *,
    job_name: str,
    image: str,
    facts: InstanceFacts,
    spec: LaunchSpec,
    paths: JobPaths,
    claim_name: str,
    service_account: str,
) -> dict[str, Any]:
    """The pod of one node: all its Neuron devices and EFA interfaces, FSx at /data, /dev/shm."""
    requests, limits = compute_resources(vcpus=facts.vcpus, memory_gib=facts.memory_gib)
    devices = device_limits(neuron_devices=facts.neuron_devices, efa_interfaces=facts.efa_interfaces)
    return {
        "metadata": {"labels": {"app.kubernetes.io/name": "bert-pretrain", "trainium-eks/job": job_name}},
        "spec": {
            "serviceAccountName": service_account,
            "automountServiceAccountToken": False,
            "restartPolicy": "Never",
            "nodeSelector": {INSTANCE_TYPE_LABEL: facts.name, **TRAINIUM_NODE_LABEL},
            "tolerations": [dict(TRAINIUM_TOLERATION)],
            # SIGTERM -> finish the step, write a checkpoint (training.stop): time derived from
            # a BERT-large state and the default FSx's throughput.
            "terminationGracePeriodSeconds": termination_grace_period_s(),
            "containers": [
                {
                    "name": "trainer",
                    "image": image,
                    "command": container_command(spec, paths),
                    "env": [{"name": k, "value": v} for k, v in sorted(container_env(spec, paths).items())],
                    "resources": {"requests": {**requests, **devices}, "limits": {**limits, **devices}},
                    "volumeMounts": volume_mounts(),
                    "securityContext": training_security_context(),
                }
            ],
            "securityContext": pod_security_context(),
            "volumes": volumes(claim_name),
        },
    }


def volcano_job(
    *,
    job_name: str,
    namespace: str,
    queue: str,
    nodes: int,
    max_retry: int,
    template: Mapping[str, Any],
) -> dict[str, Any]:
    """The Volcano Job: ``nodes`` pods started together (gang), restarted together on failure."""
    return {
        "apiVersion": VOLCANO_API,
        "kind": "Job",
        "metadata": {
            "name": job_name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": "bert-pretrain"},
        },
        "spec": {
            "schedulerName": "volcano",
            "queue": queue,
            "minAvailable": nodes,
            "maxRetry": max_retry,
            "policies": [dict(p) for p in RESTART_POLICIES],
            # svc: stable host names + headless Service (the c10d endpoint); env: VC_TASK_INDEX.
            "plugins": {"svc": ["--publish-not-ready-addresses"], "env": []},
            "tasks": [
                {"name": TASK_NAME, "replicas": nodes, "minAvailable": nodes, "template": dict(template)}
            ],
        },
    }


class BertPretrainingJob(Construct):
    """BERT pretraining on the Trainium nodegroup, as a Volcano Job applied by the stack.

    Defaults (each a keyword argument): BERT-large, micro-batch 16, global batch 16,384 (the
    accumulation follows from the worker count: 2 x trn1.32xlarge = 64 workers -> 16),
    28,125 steps, nproc_per_node = the type's NeuronCores, c10d rendezvous on node 0, checkpoint
    every 200 steps, torchrun max restarts 3, Volcano maxRetry 3, queue ``training``.

    The Volcano Job's name is ``<name_prefix>-<8 hex of its spec>`` and its construct id carries
    the same digest: a changed spec creates a new job and deletes the old one in the same
    deployment (pod templates are immutable), an unchanged spec leaves a running job alone.
    Training state is not tied to the name: ``run_name`` picks the output directory, so a new
    job with a changed, compatible spec (e.g. more restarts) resumes from the old checkpoints.

    Attributes:
        job_name, plan (:class:`TrainingPlan`), launch_spec, paths, service_account,
        manifest (the job's ``KubernetesManifest``), job (the Volcano Job as a dict).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: eks.ICluster,
        facts: InstanceFacts,
        nodes: int,
        max_nodes: int,
        image: str,
        namespace: str,
        claim_name: str,
        image_key: str | None = None,
        queue: str = "training",
        model: str = "large",
        batch_size: int = 16,
        global_batch: int = DEFAULT_GLOBAL_BATCH,
        max_steps: int = DEFAULT_MAX_STEPS,
        nproc_per_node: int | None = None,
        script_args: Mapping[str, Any] | None = None,
        rdzv_backend: str = "c10d",
        etcd_endpoint: str | None = None,
        dataset_name: str = "bert-wikicorpus-seq128",
        cache_set: str = "bert-large-seq128",
        run_name: str = "bert-large-phase1",
        checkpoint_every: int = 200,
        max_restarts: int = 3,
        max_retry: int = 3,
        name_prefix: str = "bert",
        service_account_name: str = "bert-trainer",
        depends_on: Sequence[IConstruct] = (),
    ) -> None:
        """
        Args:
            cluster: the EKS cluster (with a kubectl provider).
            facts: the Trainium instance type's facts row.
            nodes: pods (= nodes) of the job. max_nodes: the nodegroup's maximum (checked).
            image: training image URI (the platform's ECR repository).
            image_key: a plain string that identifies the image (its content-hash tag), used
                for the job name when ``image`` is a token. Default: ``image`` itself.
            namespace / claim_name: the training namespace and the FSx claim (mounted at /data).
            queue: Volcano queue. Default "training".
            model: ``large`` | ``base`` | ``tiny``. Default "large".
            batch_size: micro-batch per worker. Default 16.
            global_batch: sequences per optimizer step. Default 16,384.
            max_steps: optimizer steps of the schedule. Default 28,125.
            nproc_per_node: workers per node. Default: the type's NeuronCores.
            script_args: more ``training.pretrain`` flags (e.g. ``{"lr": 4e-4}``). Default none.
            rdzv_backend: ``c10d`` (default) | ``etcd`` | ``etcd-v2`` (needs ``etcd_endpoint``).
            etcd_endpoint: ``host:port`` of the etcd add-on. Default None.
            dataset_name: ``/data/datasets/<name>`` holds the shards. Default "bert-wikicorpus-seq128".
            cache_set: ``/data/neuron-cache/<set>``; one per concurrently running job.
                Default "bert-large-seq128".
            run_name: ``/data/runs/<run>`` (checkpoints, TensorBoard). Default "bert-large-phase1".
            checkpoint_every: optimizer steps between checkpoints. Default 200.
            max_restarts: torchrun restarts of the worker group. Default 3.
            max_retry: Volcano restarts of the whole job (pod failed or evicted). Default 3.
            name_prefix: prefix of the job name (<= 45 characters). Default "bert".
            service_account_name: created in ``namespace``, with no AWS role. Default "bert-trainer".
            depends_on: constructs applied first (Volcano chart and queue, the claim).
        """
        super().__init__(scope, id)
        if model not in MODELS:
            raise ConfigError("model", model, f"choose one of {', '.join(MODELS)}")
        if rdzv_backend not in RDZV_BACKENDS:
            raise ConfigError("rdzv_backend", rdzv_backend, f"choose one of {', '.join(RDZV_BACKENDS)}")
        if rdzv_backend != "c10d" and not etcd_endpoint:
            raise ConfigError(
                "rdzv_backend",
                rdzv_backend,
                "etcd rendezvous needs the etcd add-on (etcd_enabled=true); or use c10d",
            )
        for name, value in (("max_steps", max_steps), ("checkpoint_every", checkpoint_every)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(name, value, "must be a whole number of at least 1")
        for name, value in (("max_restarts", max_restarts), ("max_retry", max_retry)):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 100:
                raise ConfigError(name, value, "use 0 to 100")
        # Pod host names are <job>-worker-<i>: the job name leaves room for that suffix.
        _check_label("name_prefix", name_prefix, max_len=MAX_LABEL - 9 - len(f"-{TASK_NAME}-{nodes - 1}"))
        for name, value in (
            ("namespace", namespace),
            ("queue", queue),
            ("dataset_name", dataset_name),
            ("cache_set", cache_set),
            ("run_name", run_name),
            ("service_account_name", service_account_name),
        ):
            if not Token.is_unresolved(value):
                _check_label(name, value)
        self.plan = plan_training(
            facts=facts,
            nodes=nodes,
            max_nodes=max_nodes,
            nproc_per_node=nproc_per_node,
            batch_size=batch_size,
            global_batch=global_batch,
        )
        self.paths = job_paths(dataset_name=dataset_name, cache_set=cache_set, run_name=run_name)
        extra = dict(script_args or {})
        reserved = {
            "data_dir",
            "output_dir",
            "batch_size",
            "grad_accum_usteps",
            "max_steps",
            "model",
            "checkpoint_every",
            "precompile",
        }
        clash = sorted(reserved & set(extra))
        if clash:
            raise ConfigError("script_args", clash[0], "set it with its own property, not script_args")
        args = script_args_from_dict(
            {
                **extra,
                "model": model,
                "data_dir": self.paths.data_dir,
                "output_dir": self.paths.output_dir,
                "batch_size": batch_size,
                "grad_accum_usteps": self.plan.grad_accum_usteps,
                "max_steps": max_steps,
                "checkpoint_every": checkpoint_every,
            }
        )
        self.service_account = service_account_name

        if image_key is None:
            if Token.is_unresolved(image):
                raise ConfigError(
                    "image_key",
                    None,
                    "give the image's tag when image is a token "
                    "(the job name must not depend on token numbering)",
                )
            image_key = image

        def build(job_name: str, image: str = image) -> tuple[LaunchSpec, dict[str, Any]]:
            endpoint = rank0_endpoint(job_name) if rdzv_backend == "c10d" else str(etcd_endpoint)
            spec = LaunchSpec(
                nnodes=nodes,
                nproc_per_node=self.plan.nproc_per_node,
                rdzv_endpoint=endpoint,
                rdzv_backend=rdzv_backend,
                rdzv_id=job_name,
                max_restarts=max_restarts,
                script_args=tuple(args),
            )
            template = pod_template(
                job_name=job_name,
                image=image,
                facts=facts,
                spec=spec,
                paths=self.paths,
                claim_name=claim_name,
                service_account=service_account_name,
            )
            return spec, volcano_job(
                job_name=job_name,
                namespace=namespace,
                queue=queue,
                nodes=nodes,
                max_retry=max_retry,
                template=template,
            )

        # The name hashes the spec rendered with a placeholder name (the name appears inside it).
        _, draft = build(name_prefix, image_key)
        self.job_name = hashed_name(name_prefix, draft)
        self.launch_spec, self.job = build(self.job_name)

        sa = eks.KubernetesManifest(
            self,
            "ServiceAccount",
            cluster=cluster,
            manifest=[
                {
                    "apiVersion": "v1",
                    "kind": "ServiceAccount",
                    "metadata": {"name": service_account_name, "namespace": namespace},
                    # Training reads and writes FSx only: no Kubernetes API token, no AWS role.
                    "automountServiceAccountToken": False,
                }
            ],
        )
        self.manifest = eks.KubernetesManifest(
            self,
            f"Job{spec_digest(draft)}",
            cluster=cluster,
            manifest=[self.job],
        )
        self.manifest.node.add_dependency(sa)
        self.service_account_manifest = sa
        for dependency in (*depends_on,):
            sa.node.add_dependency(dependency)
            self.manifest.node.add_dependency(dependency)


def job_commands(*, job_name: str, namespace: str) -> dict[str, str]:
    """The commands a user types to watch a job (also the stack's outputs).

    Rank 0 runs in pod ``worker-0`` with the c10d rendezvous: torch assigns node ranks in the
    sorted order of the agents' host names (``_mark_rendezvous_complete`` in
    torch/distributed/elastic/rendezvous/dynamic_rendezvous.py), and Volcano names the pods
    ``<job>-worker-<index>``. The etcd rendezvous ranks nodes by arrival instead: there, rank 0's
    lines (the only INFO lines) may come from another pod (``kubectl logs -l trainium-eks/job=``).
    """
    pod0 = f"{job_name}-{TASK_NAME}-0"
    return {
        "Rank0Logs": f"kubectl logs -n {namespace} -f {pod0}",
        "JobStatus": f"kubectl get vcjob -n {namespace} {job_name} -o wide",
        "NeuronTop": f"kubectl exec -n {namespace} -it {pod0} -- neuron-top",
    }


def add_job_outputs(scope: Construct, *, job: BertPretrainingJob, namespace: str) -> None:
    """CfnOutputs with the exact watch commands."""
    for key, command in job_commands(job_name=job.job_name, namespace=namespace).items():
        CfnOutput(scope, key, value=command, description=f"{key} of the training job")
