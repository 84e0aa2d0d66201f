"""TorchX component: the same pretraining job as the CDK construct, for ``torchx run -s kubernetes``.

Usage (from the repository, with the platform deployed and kubectl pointing at the cluster)::

    torchx run -s kubernetes -cfg namespace=training,queue=training \\
        trainium_job/torchx_component.py:trn_dist_ddp --image <ECR URI>:<tag> --nnodes 2

The arguments build the job's :class:`~trainium_job.spec.BertJobSpec` (defaults and checks are
the spec's); the pod is :func:`~trainium_job.pod.pod_template`'s, the CDK construct's. TorchX
renders the container from the role (command, environment, resources, the claim) and the
overlay sets the rest of the pod to the template's, so both jobs run the same pod.
Imports ``torchx`` only: no aws-cdk, no torch.
"""

from __future__ import annotations

from typing import Any

import torchx.specs as specs
from torchx.specs.overlays import JOIN, PUT

from .errors import ConfigError
from .instances import instance_facts
from .job import SERVICE_ACCOUNT, fabric_check, launch_spec
from .naming import TASK_NAME
from .paths import DATA_MOUNT
from .plan import TrainingPlan, plan_training
from .pod import RDZV_PORT, pod_template, rank0_endpoint
from .scheduling import INSTANCE_TYPE_LABEL
from .spec import BertJobSpec, ScriptArg, context_key
from .stop_budget import termination_grace_period_s
from .worker import PhaseRun, job_description

_DEFAULT = BertJobSpec()
#: TorchX's name of the job's app (and of its Volcano Job).
APP_NAME = "bert-pretrain"


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
    launch = launch_spec(spec, plan, rdzv_endpoint=rank0_endpoint(app_id, task_pod=f"{TASK_NAME}-0-0"))
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
    role = _role(pod, spec=spec, plan=plan, image=image, claim=claim, instance_type=instance_type)
    return specs.AppDef(name=APP_NAME, roles=[role])


def _role(
    pod: dict[str, Any], *, spec: BertJobSpec, plan: TrainingPlan, image: str, claim: str, instance_type: str
) -> specs.Role:
    """The TorchX role that runs ``pod``'s container on every node, with ``pod``'s other fields."""
    (container,) = pod["spec"]["containers"]
    return specs.Role(
        name=TASK_NAME,
        image=image,
        entrypoint=container["command"][0],
        args=container["command"][1:],
        num_replicas=plan.nodes,
        # Values only: the overlay puts the template's whole env (downward API entries too) back.
        env={e["name"]: e["value"] for e in container["env"] if "value" in e},
        resource=_resource(container["resources"]["limits"], instance_type),
        port_map={"c10d": RDZV_PORT},
        max_retries=spec.max_retry,
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
