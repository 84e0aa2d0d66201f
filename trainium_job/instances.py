"""Facts about the Trainium instance types the platform supports: the one table everything reads.

Sources (checked 2026-11): EC2 accelerated-computing instance specifications, the Neuron
documentation ("trn1.32xlarge has 8 EFA devices, trn1n.32xlarge has 16"), and on-demand
us-east-1 list prices. Where a figure could not be confirmed it is ``None`` and shown as such.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class InstanceFacts:
    """One row of the facts table.

    Attributes:
        name: the EC2 instance type.
        neuron_devices: Trainium chips, advertised to Kubernetes as ``aws.amazon.com/neuron``.
        neuron_cores: NeuronCores visible to the runtime at the default logical-core setting
            (``aws.amazon.com/neuroncore``); also the default ``nproc_per_node``.
        accelerator_memory_gib: device memory of all chips together.
        efa_interfaces: EFA interfaces usable for multi-node collectives (one per network card).
        network_gbps: aggregate network bandwidth.
        vcpus: host vCPUs.
        memory_gib: host memory.
        on_demand_usd_per_hour: us-east-1 on-demand price, for estimates only.
        peak_bf16_tflops: dense BF16 peak of all chips, for MFU estimates.
    """

    name: str
    neuron_devices: int
    neuron_cores: int
    accelerator_memory_gib: int
    efa_interfaces: int
    network_gbps: float
    vcpus: int
    memory_gib: int
    on_demand_usd_per_hour: float | None
    peak_bf16_tflops: float | None

    @property
    def multi_node(self) -> bool:
        """Whether collectives can span nodes (needs EFA)."""
        return self.efa_interfaces > 0

    @property
    def network_cards(self) -> range:
        """Network card indexes that carry an EFA interface."""
        return range(self.efa_interfaces)


INSTANCE_FACTS: dict[str, InstanceFacts] = {
    facts.name: facts
    for facts in (
        # trn1.2xlarge has no EFA usable for multi-node jobs (Neuron docs): single node only.
        InstanceFacts("trn1.2xlarge", 1, 2, 32, 0, 12.5, 8, 32, 1.34, 190.0),
        InstanceFacts("trn1.32xlarge", 16, 32, 512, 8, 800.0, 128, 512, 21.50, 3040.0),
        InstanceFacts("trn1n.32xlarge", 16, 32, 512, 16, 1600.0, 128, 512, 24.78, 3040.0),
        # trn2: 8 physical cores per chip, 64 logical cores at the default LNC=2.
        # Price and peak are not in our sources: unknown rather than guessed.
        InstanceFacts("trn2.48xlarge", 16, 64, 1536, 16, 3200.0, 192, 2048, None, None),
    )
}


def instance_facts(instance_type: str) -> InstanceFacts:
    """The facts row for ``instance_type``; ``KeyError`` naming the supported types otherwise."""
    if not isinstance(instance_type, str):
        # An ec2.InstanceType, say: the table is keyed by the name, which such objects print as.
        raise KeyError(
            f"give the instance type's name as a string (e.g. 'trn1.32xlarge'), not a "
            f"{type(instance_type).__qualname__}; supported: {', '.join(INSTANCE_FACTS)}"
        )
    try:
        return INSTANCE_FACTS[instance_type]
    except KeyError:
        raise KeyError(
            f"unsupported instance type {instance_type!r}; supported: {', '.join(INSTANCE_FACTS)}"
        ) from None
