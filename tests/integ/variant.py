"""The platform ``make integ`` deploys: the default one, small and short, and what it costs.

The instance type, region and AZ IDs are the app's (cdk.json, ``-c``); the node count is
``-c desired_nodes=N`` (min and max follow it). The job trains tiny BERT for a few steps with one
micro-batch per worker, on the public shards, on a SCRATCH_2 file system.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainium_eks import PlatformConfig, config_from_context, instance_facts, platform_review

#: Context of the variant (any key the user gives wins, except where noted in integ_context).
INTEG_CONTEXT: dict[str, str] = {
    "name_prefix": "trn-integ",
    "fsx_deployment_type": "SCRATCH_2",
    "fsx_storage_gib": "1200",
    "etcd_enabled": "false",
    "training_model": "tiny",
    "training_max_steps": "20",
    "training_checkpoint_every": "10",
    "training_script_args": '{"warmup_steps": "5"}',
    "training_run_name": "integ-tiny",
    "training_cache_set": "integ-tiny-seq128",
    # Phase 2 from phase 1, as the default deploy runs it, but as short: the public seq-512 shards,
    # 20 steps, and both models exported.
    "phase2_max_steps": "20",
    "phase2_checkpoint_every": "10",
    "phase2_script_args": '{"warmup_steps": "5"}',
    "phase2_run_name": "integ-tiny-phase2",
    "phase2_cache_set": "integ-tiny-seq512",
}
#: Hours of node time to budget for one run: cluster and nodes up (~40 min), staging, precompile
#: and training of tiny BERT, teardown. An estimate for the cost acknowledgement, not a bound.
BUDGET_HOURS = 2.0


def integ_context(user: Mapping[str, Any]) -> dict[str, Any]:
    """The variant's context: :data:`INTEG_CONTEXT`, then the user's plain keys; the global batch
    is one micro-batch per worker of the chosen nodes (so any node count is valid)."""
    context: dict[str, Any] = {**INTEG_CONTEXT, **user}
    defaults = PlatformConfig()
    nodes = int(context.get("desired_nodes", defaults.desired_nodes))
    context.setdefault("min_nodes", nodes)
    context.setdefault("max_nodes", nodes)
    facts = instance_facts(str(context.get("instance_type", defaults.instance_type)))
    batch = int(context.get("training_batch_size", defaults.training.batch_size))
    context.setdefault("training_global_batch", batch * nodes * facts.neuron_cores)
    phase2_batch = int(context.get("phase2_batch_size", 2))
    context.setdefault("phase2_global_batch", phase2_batch * nodes * facts.neuron_cores)
    return context


def integ_config(user: Mapping[str, Any]) -> PlatformConfig:
    return config_from_context(integ_context(user))


def cost_notice(config: PlatformConfig) -> str:
    """The synth review of the variant and what one run is budgeted to cost."""
    price = config.facts.on_demand_usd_per_hour
    budget = (
        f"${price * config.desired_nodes * BUDGET_HOURS:,.0f} of Trainium time at list price"
        if price is not None
        else "no list price in the facts table"
    )
    return "\n".join(
        [
            platform_review(config),
            f"integ run: about {BUDGET_HOURS:g} h of {config.desired_nodes} x {config.instance_type} "
            f"= {budget}, plus EKS, NAT, FSx and the system nodes for that time",
        ]
    )
