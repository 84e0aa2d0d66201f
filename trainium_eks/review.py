"""The short review ``cdk synth`` prints: what the configuration will cost and deliver."""

from __future__ import annotations

from .config import PlatformConfig, unverified_addons
from .training_config import training_review, training_warnings


def platform_review(config: PlatformConfig) -> str:
    """Lines describing the Trainium capacity of ``config``, from the facts table."""
    facts = config.facts
    nodes = config.desired_nodes
    price = facts.on_demand_usd_per_hour
    cost = (
        f"${price * nodes:,.2f}/h on demand (${price:,.2f}/h per node, us-east-1 list price)"
        if price is not None
        else "unknown (no list price in the facts table)"
    )
    endpoint = (
        ("public from " + ", ".join(config.endpoint_public_cidrs) + " + private")
        if config.endpoint_public_cidrs
        else "private only"
    )
    return "\n".join(
        [
            f"Trainium platform '{config.name_prefix}' in {config.region} ({config.trainium_az_id})",
            f"  nodes:        {nodes} x {facts.name} (min {config.min_nodes}, max {config.max_nodes})",
            f"  NeuronCores:  {nodes * facts.neuron_cores} ({facts.neuron_cores} per node, "
            f"{nodes * facts.neuron_devices} Trainium devices)",
            f"  EFA:          {facts.efa_interfaces} interfaces per node, "
            f"{nodes * facts.network_gbps:,.0f} Gbps in all",
            f"  cost:         {cost}",
            f"  Kubernetes:   {config.kubernetes_version}, API endpoint {endpoint}",
            f"  FSx:          {config.fsx_deployment_type} {config.fsx_storage_gib:,} GiB at /data, "
            f"etcd {'on' if config.etcd_enabled else 'off'}",
            *training_review(config),
            *(f"warning: {line}" for line in training_warnings(config)),
            *(
                f"warning: {addon} is not verified for Kubernetes {config.kubernetes_version}; EKS refuses "
                "versions it does not offer (check `aws eks describe-addon-versions`)"
                for addon in unverified_addons(config.kubernetes_version)
            ),
        ]
    )
