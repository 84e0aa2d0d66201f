"""TorchX components: the CDK constructs' jobs, for ``torchx run -s kubernetes``.

Usage (from the repository, with the platform deployed and kubectl pointing at the cluster)::

    # BERT pretraining (trainium_eks.BertPretrainingJob's job)
    torchx run -s kubernetes -cfg namespace=training,queue=training \\
        trainium_job/torchx_component.py:trn_dist_ddp --image <ECR URI>:<tag> --nnodes 2

    # your own program (trainium_eks.TrainiumTrainingJob's job)
    torchx run -s kubernetes -cfg namespace=training,queue=training \\
        trainium_job/torchx_component.py:trn_program --image <your image> --run_name my-run \\
        --tools_image <the library's tools image> --script /app/train.py -- --steps 100

The arguments build the job's spec (:class:`~trainium_job.spec.BertJobSpec`,
:class:`~trainium_job.program_job.ProgramJobSpec`: defaults and checks are the spec's); the pod is
the CDK construct's (:func:`~trainium_job.pod.pod_template`, :func:`~trainium_job.gang.gang_pod`).
TorchX renders the container from the role (command, environment, resources, the claim) and the
overlay sets the rest of the pod to the template's, so both jobs run the same pod.
Imports ``torchx`` only: no aws-cdk, no torch.
"""

# No ``from __future__ import annotations``: TorchX reads the components' annotations as types
# to parse ``torchx run``'s arguments (torchx.specs.builders ``component_args_from_str``).
import shlex
from dataclasses import fields, replace
from typing import Any

import torchx.specs as specs
from torchx.specs.overlays import JOIN, PUT

from . import checks
from .errors import ConfigError
from .gang import Gang, gang_pod
from .instances import INSTANCE_FACTS, InstanceFacts, instance_facts
from .job import SERVICE_ACCOUNT, fabric_check, launch_spec
from .naming import DEFAULT_NAME_PREFIX, TASK_NAME
from .paths import DATA_MOUNT
from .plan import plan_training
from .pod import RDZV_PORT, pod_template, rank0_endpoint
from .pod_program.description import Budget
from .program_job import (
    JOB_SERVICE_ACCOUNT,
    ProgramJobSpec,
    TrainingCommand,
    check_nodes,
    program_budget,
    program_description,
    program_launch,
)
from .scheduling import INSTANCE_TYPE_LABEL, TRAINING_NAMESPACE, TRAINING_QUEUE
from .spec import BertJobSpec, ScriptArg, context_key
from .stop_budget import termination_grace_period_s
from .worker import PhaseRun, job_description

_DEFAULT = BertJobSpec()
#: TorchX's name of the job's app (and of its Volcano Job).
APP_NAME = "bert-pretrain"
#: TorchX's name of a job of the user's own program: the CDK job's default name prefix (the
#: platform's, as every construct's), and so the same ``app.kubernetes.io/name`` label on its pods.
PROGRAM_APP_NAME = DEFAULT_NAME_PREFIX
#: TorchX makes one Volcano task per replica: node 0's pod is ``<app>-worker-0-0``.
_TASK_POD_0 = f"{TASK_NAME}-0-0"


def _program_default(name: str) -> Any:
    """``ProgramJobSpec``'s default of field ``name``: the component's defaults are the spec's."""
    (default,) = (f.default for f in fields(ProgramJobSpec) if f.name == name)
    return default


def flags_to_mapping(argv: tuple[str, ...] | list[str]) -> dict[str, ScriptArg]:
    """``("--lr", "4e-4", "--fp32_master_weights")`` -> ``{"lr": "4e-4", "fp32_master_weights": True}``."""
    out: dict[str, ScriptArg] = {}
    items = list(argv)
    i = 0
    while i < len(items):
        arg = items[i]
        if not arg.startswith("--") or len(arg) == 2:
            raise ConfigError(context_key("script_args"), arg, "give '--name value' or '--switch'")
        key, eq, value = arg[2:].partition("=")
        if eq:
            out[key] = value
            i += 1
        elif i + 1 < len(items) and not items[i + 1].startswith("--"):
            out[key] = items[i + 1]
            i += 2
        else:
            out[key] = True
            i += 1
    return out


def trn_dist_ddp(
    *script_args: str,
    image: str,
    nnodes: int = 2,
    instance_type: str = "trn1.32xlarge",
    nproc_per_node: int = _DEFAULT.nproc_per_node,
    batch_size: int = _DEFAULT.batch_size,
    global_batch: int = _DEFAULT.global_batch,
    max_steps: int = _DEFAULT.max_steps,
    model: str = _DEFAULT.model,
    checkpoint_every: int = _DEFAULT.checkpoint_every,
    claim: str = "fsx-claim",
    dataset_name: str = _DEFAULT.dataset_name,
    cache_set: str = _DEFAULT.cache_set,
    run_name: str = _DEFAULT.run_name,
    max_restarts: int = _DEFAULT.max_restarts,
    max_retries: int = _DEFAULT.max_retry,
) -> specs.AppDef:
    """BERT pretraining on ``nnodes`` Trainium nodes (one pod per node, all devices of each).

    Args:
        script_args: more training.trainer.pretrain flags, e.g. ``--lr 4e-4``.
        image: the training image (the platform's ECR repository).
        nnodes: nodes (pods). instance_type: the Trainium type (facts table).
        nproc_per_node: workers per node; 0 = the type's NeuronCores.
        batch_size / global_batch: the accumulation is global / (batch x workers).
        max_steps, model, checkpoint_every: training.trainer.pretrain flags.
        claim: the FSx PersistentVolumeClaim (mounted at /data).
        dataset_name, cache_set, run_name: /data/datasets/<>, /data/neuron-cache/<>, /data/runs/<>.
        max_restarts: torchrun restarts. max_retries: Volcano job restarts (RestartJob).
    """
    spec = BertJobSpec(
        model=model,
        batch_size=batch_size,
        global_batch=global_batch,
        max_steps=max_steps,
        nproc_per_node=nproc_per_node,
        dataset_name=dataset_name,
        cache_set=cache_set,
        run_name=run_name,
        checkpoint_every=checkpoint_every,
        max_restarts=max_restarts,
        max_retry=max_retries,
        script_args=tuple(flags_to_mapping(script_args).items()),
    )
    facts = instance_facts(instance_type)
    plan = plan_training(spec, facts=facts, nodes=nnodes, max_nodes=nnodes)
    app_id = specs.macros.app_id
    # TorchX makes one Volcano task per replica: node 0's pod is <app>-worker-0-0.
    # The id stays the default: a c10d store lives and dies with its job, and the id must be
    # known before TorchX fills in the app id.
    launch = launch_spec(spec, plan, rdzv_endpoint=rank0_endpoint(app_id, task_pod=_TASK_POD_0))
    description = job_description(
        job_name=app_id,
        phases=[PhaseRun(launch, spec.paths)],
        fabric_check=fabric_check(spec, plan, facts),
        grace_s=termination_grace_period_s(),
        hardware=f"{plan.nodes} x {facts.name}",
    )
    pod = pod_template(
        job_name=app_id,
        image=image,
        facts=facts,
        spec=launch,
        description=description,
        claim_name=claim,
        service_account=SERVICE_ACCOUNT,
    )
    role = _role(
        pod,
        nodes=plan.nodes,
        max_retries=spec.max_retry,
        image=image,
        claim=claim,
        instance_type=instance_type,
    )
    return specs.AppDef(name=APP_NAME, roles=[role])


def trn_program(
    *script_args: str,
    image: str,
    run_name: str,
    script: str = "",
    module: str = "",
    nnodes: int = 2,
    instance_type: str = "trn1.32xlarge",
    nproc_per_node: int = _program_default("nproc_per_node"),
    claim: str = "fsx-claim",
    cache_set: str = "",
    precompile: str = "",
    fabric_check: bool = _program_default("fabric_check"),
    max_restarts: int = _program_default("max_restarts"),
    max_retries: int = _program_default("max_retry"),
    tools_image: str = "",
    budget_usd: int = 0,
    node_start_minutes: int = 0,
    env: dict[str, str] | None = None,
    service_account: str = JOB_SERVICE_ACCOUNT,
) -> specs.AppDef:
    """Your own training program on ``nnodes`` Trainium nodes, as ``trainium_eks.TrainiumTrainingJob``
    runs it (one pod per node, all devices of each, the pod program around torchrun).

    Args:
        script_args: your program's own arguments (after ``--``), e.g. ``--steps 100``.
        image: your training image.
        run_name: its run directory, /data/runs/<run_name> (checkpoints; a rerun resumes there).
        script: the script torchrun starts, its absolute path in the image (or module).
        module: the module torchrun starts (``-m``), e.g. my_project.train (or script).
        nnodes: nodes (pods).
        instance_type: the Trainium type (facts table).
        nproc_per_node: workers per node; 0 = the type's NeuronCores.
        claim: the FSx PersistentVolumeClaim (mounted at /data).
        cache_set: the compile cache, /data/neuron-cache/<cache_set>; "" = none.
        precompile: the trial run neuron_parallel_compile makes once per cache set: the same
            script or module with these arguments, split as a shell does
            (``--precompile="--steps 10"``); "" = none. Needs a cache_set.
        fabric_check: time an all-reduce across the nodes before training (multi-node, EFA).
        max_restarts: torchrun restarts.
        max_retries: Volcano job restarts (RestartJob).
        tools_image: the library's tools image, for an image that lacks the library: an init
            container copies the library's programs from it. "" = the image holds them.
        budget_usd: the spend ceiling, USD, at the type's list price; 0 = none.
        node_start_minutes: minutes counted once per node before its pod starts (launch, join,
            image pull). Default 0: none (nodes already running); the CDK job counts its gang
            wait's floor (trainium_eks.nodes.gang_wait.gang_wait_floor), give that for the same
            ceiling on nodes launched per job.
        env: your program's own variables (``--env A=1,B=2``).
        service_account: the pods' ServiceAccount, which must exist in the namespace (a
            TrainiumTrainingJob creates it).

    TorchX renders no gang wait (do-not-disrupt), health gate or abort policies: a failed fabric
    check, deadline or ceiling restarts the job until its retries run out.
    """
    facts = _facts(instance_type)
    check_nodes(facts, nnodes, field_name="nnodes")
    checks.whole_number("node_start_minutes", node_start_minutes, minimum=0)
    command = TrainingCommand(module=module or None, script=script or None, args=script_args)
    spec = ProgramJobSpec(
        command=command,
        run_name=run_name,
        nproc_per_node=nproc_per_node,
        precompile=replace(command, args=tuple(shlex.split(precompile))) if precompile else None,
        cache_set=cache_set or None,
        fabric_check=fabric_check,
        max_restarts=max_restarts,
        max_retry=max_retries,
        env=tuple((env or {}).items()),
    )
    budget = program_budget(spec, facts, budget_usd or None, node_start_s=node_start_minutes * 60)
    gang = _gang(
        facts, nnodes, image=image, claim=claim, tools_image=tools_image, service_account=service_account
    )
    return _program_app(spec, gang, budget)


def _gang(
    facts: InstanceFacts, nodes: int, *, image: str, claim: str, tools_image: str, service_account: str
) -> Gang:
    """The pods' gang as the CDK job's (``TrainiumTrainingJob``) for the same arguments."""
    return Gang(
        facts=facts,
        nodes=nodes,
        image=image,
        image_key=image,
        name_prefix=PROGRAM_APP_NAME,
        # TorchX's own (its -cfg): no pod field names them.
        namespace=TRAINING_NAMESPACE,
        queue=TRAINING_QUEUE,
        claim_name=claim,
        service_account=service_account,
        app_name=PROGRAM_APP_NAME,
        runtime_image=tools_image or None,
    )


def _program_app(spec: ProgramJobSpec, gang: Gang, budget: Budget | None) -> specs.AppDef:
    """The app whose pods are ``gang``'s, running ``spec`` as the CDK job's do (its name TorchX's
    app id, node 0's pod ``<app>-worker-0-0``)."""
    app_id = specs.macros.app_id
    # As trn_dist_ddp's: the rendezvous id is the app's name, known before TorchX fills in the id.
    endpoint = rank0_endpoint(app_id, task_pod=_TASK_POD_0)
    launch = program_launch(spec, gang, rdzv_id=PROGRAM_APP_NAME, rdzv_endpoint=endpoint)
    description = program_description(spec, gang, launch, job_name=app_id, budget=budget)
    pod = gang_pod(gang, job_name=app_id, launch=launch, description=description)
    role = _role(
        pod,
        nodes=gang.nodes,
        max_retries=spec.max_retry,
        image=gang.image,
        claim=gang.claim_name,
        instance_type=gang.facts.name,
    )
    return specs.AppDef(name=PROGRAM_APP_NAME, roles=[role])


def _facts(instance_type: str) -> InstanceFacts:
    try:
        return instance_facts(instance_type)
    except KeyError:
        raise ConfigError("instance_type", instance_type, f"use one of {', '.join(INSTANCE_FACTS)}") from None


def _role(
    pod: dict[str, Any], *, nodes: int, max_retries: int, image: str, claim: str, instance_type: str
) -> specs.Role:
    """The TorchX role that runs ``pod``'s container on every node, with ``pod``'s other fields."""
    (container,) = pod["spec"]["containers"]
    return specs.Role(
        name=TASK_NAME,
        image=image,
        entrypoint=container["command"][0],
        args=container["command"][1:],
        num_replicas=nodes,
        # Values only: the overlay puts the template's whole env (downward API entries too) back.
        env={e["name"]: e["value"] for e in container["env"] if "value" in e},
        resource=_resource(container["resources"]["limits"], instance_type),
        port_map={"c10d": RDZV_PORT},
        max_retries=max_retries,
        retry_policy=specs.RetryPolicy.APPLICATION,
        mounts=[specs.VolumeMount(src=claim, dst_path=DATA_MOUNT)],
        metadata={"kubernetes": {"V1Pod": _overlay(pod, container)}},
    )


def _resource(limits: dict[str, str], instance_type: str) -> specs.Resource:
    devices = {k: int(v) for k, v in limits.items() if k not in ("cpu", "memory")}
    return specs.Resource(
        cpu=int(limits["cpu"].removesuffix("m")) / 1000,
        gpu=0,
        memMB=int(limits["memory"].removesuffix("Mi")) * 1024 * 1024 // 1_000_000,
        capabilities={INSTANCE_TYPE_LABEL: instance_type},
        devices=devices,
    )


def _overlay(pod: dict[str, Any], container: dict[str, Any]) -> dict[str, Any]:
    """The template's pod fields put over what TorchX renders.

    The container is joined by image (TorchX names it after its replica): every field of the
    template's but the command, which stays the role's so that TorchX fills in the app id;
    the ports are the template's (the metrics port; the rendezvous port TorchX declares is
    dropped: pods reach it by host name, as in the CDK job), and TorchX's own environment
    (``TORCHX_*``, unused by the script) is replaced.
    """
    spec = {PUT(k): v for k, v in pod["spec"].items() if k != "containers"}
    # A joined container's fields replace TorchX's whole (top-level strategic merge).
    fields = {k: v for k, v in container.items() if k != "command"}
    return {"spec": {**spec, JOIN("containers", on="image"): [fields]}}
