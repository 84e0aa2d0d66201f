"""TorchX component: the same pretraining job as the CDK construct, for ``torchx run -s kubernetes``.

Usage (from the repository, with the platform deployed and kubectl pointing at the cluster)::

    torchx run -s kubernetes -cfg namespace=training,queue=training \\
        training/torchx_component.py:trn_dist_ddp --image <ECR URI>:<tag> --nnodes 2

Command, environment, devices, volumes and retries come from ``training.job_spec`` and
``training.launch``, exactly as for ``trainium_eks.training_job``; the instance facts from
``trainium_eks.instance_types`` (install this repository's package where you run torchx).
"""

from __future__ import annotations

import torchx.specs as specs

from training.job_spec import (
    DATA_MOUNT,
    RDZV_PORT,
    TASK_NAME,
    compute_resources,
    container_command,
    container_env,
    device_limits,
    job_paths,
    pod_security_context,
    training_security_context,
)
from training.launch import LaunchSpec, script_args_from_dict


def trn_dist_ddp(
    *script_args: str,
    image: str,
    nnodes: int = 2,
    instance_type: str = "trn1.32xlarge",
    nproc_per_node: int = 0,
    batch_size: int = 16,
    global_batch: int = 16384,
    max_steps: int = 28125,
    model: str = "large",
    checkpoint_every: int = 200,
    claim: str = "fsx-claim",
    dataset_name: str = "bert-wikicorpus-seq128",
    cache_set: str = "bert-large-seq128",
    run_name: str = "bert-large-phase1",
    max_restarts: int = 3,
    max_retries: int = 3,
) -> specs.AppDef:
    """BERT pretraining on ``nnodes`` Trainium nodes (one pod per node, all devices of each).

    Args:
        script_args: more training.pretrain flags, e.g. ``--lr 4e-4``.
        image: the training image (the platform's ECR repository).
        nnodes: nodes (pods). instance_type: the Trainium type (facts table).
        nproc_per_node: workers per node; 0 = the type's NeuronCores.
        batch_size / global_batch: the accumulation is global / (batch x workers).
        max_steps, model, checkpoint_every: training.pretrain flags.
        claim: the FSx PersistentVolumeClaim (mounted at /data).
        dataset_name, cache_set, run_name: /data/datasets/<>, /data/neuron-cache/<>, /data/runs/<>.
        max_restarts: torchrun restarts. max_retries: Volcano job restarts (RestartJob).
    """
    from trainium_eks.instance_types import instance_facts

    facts = instance_facts(instance_type)
    nproc = nproc_per_node or facts.neuron_cores
    workers = nnodes * nproc
    if nproc > facts.neuron_cores or global_batch % (batch_size * workers):
        raise ValueError(
            f"nproc_per_node {nproc} (max {facts.neuron_cores}) or global_batch {global_batch} "
            f"not a multiple of {batch_size} x {workers}"
        )
    paths = job_paths(dataset_name=dataset_name, cache_set=cache_set, run_name=run_name)
    args = script_args_from_dict(
        {
            "model": model,
            "data_dir": paths.data_dir,
            "output_dir": paths.output_dir,
            "batch_size": batch_size,
            "grad_accum_usteps": global_batch // (batch_size * workers),
            "max_steps": max_steps,
            "checkpoint_every": checkpoint_every,
        }
    ) + list(script_args)
    app_id = specs.macros.app_id
    spec = LaunchSpec(
        nnodes=nnodes,
        nproc_per_node=nproc,
        rdzv_backend="c10d",
        # TorchX makes one Volcano task per replica: node 0's pod is <app>-worker-0-0.
        rdzv_endpoint=f"{app_id}-{TASK_NAME}-0-0.{app_id}:{RDZV_PORT}",
        max_restarts=max_restarts,
        script_args=tuple(args),
    )
    command = container_command(spec, paths)
    requests, limits = compute_resources(vcpus=facts.vcpus, memory_gib=facts.memory_gib)
    from torchx.specs.overlays import JOIN

    from trainium_eks.nodegroup import TRAINIUM_NODE_LABEL, TRAINIUM_TOLERATION

    overlay = {
        "spec": {
            "nodeSelector": dict(TRAINIUM_NODE_LABEL),
            "tolerations": [dict(TRAINIUM_TOLERATION)],
            "securityContext": pod_security_context(),
            # TorchX names each pod's one container after its replica (worker-0, worker-1, ...):
            # merge by image, which all replicas share.
            JOIN("containers", on="image"): [
                {"image": image, "securityContext": training_security_context()}
            ],
        }
    }
    role = specs.Role(
        name=TASK_NAME,
        image=image,
        entrypoint=command[0],
        args=command[1:],
        num_replicas=nnodes,
        env=container_env(spec, paths),
        resource=specs.Resource(
            cpu=int(limits["cpu"].removesuffix("m")) / 1000,
            gpu=0,
            memMB=int(limits["memory"].removesuffix("Mi")) * 1024 * 1024 // 1_000_000,
            capabilities={"node.kubernetes.io/instance-type": instance_type},
            devices={
                k: int(v)
                for k, v in device_limits(
                    neuron_devices=facts.neuron_devices, efa_interfaces=facts.efa_interfaces
                ).items()
            },
        ),
        port_map={"c10d": RDZV_PORT},
        max_retries=max_retries,
        retry_policy=specs.RetryPolicy.APPLICATION,
        mounts=[specs.VolumeMount(src=claim, dst_path=DATA_MOUNT)],
        metadata={"kubernetes": {"V1Pod": overlay}},
    )
    del requests
    return specs.AppDef(name="bert-pretrain", roles=[role])
