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


#: Where Trainium is offered, as far as the cited source goes: region -> the AZ IDs known to offer
#: the Trn1 types there. Source (checked 2026-11): awslabs/data-on-eks@2d6580da
#: ai-ml/trainium-inferentia/locals.tf, "Trn1 and Inf2 instances are available in specific AZs in
#: us-east-1, us-east-2, and us-west-2. For Trn1, the first AZ id (below) should be used" (usw2-az4,
#: use1-az6, use2-az3); us-east-1 also lists trn1n.32xlarge among its on-demand prices
#: (aws/karpenter-provider-aws v1.14.1 pkg/providers/pricing/zz_generated.pricing_aws.go L578-581).
#: Offline and dated: ``make doctor`` asks EC2 for the account's live offerings
#: (``describe-instance-type-offerings``), which win over this table.
TRAINIUM_OFFERINGS: dict[str, tuple[str, ...]] = {
    "us-west-2": ("usw2-az4",),
    "us-east-1": ("use1-az6",),
    "us-east-2": ("use2-az3",),
}
#: The family whose AZ IDs the table lists (the source's "Trn1").
_AZ_LISTED_FAMILY = "trn1."


def region_offering_problem(region: str) -> str | None:
    """Why no Trainium node can launch in ``region`` per :data:`TRAINIUM_OFFERINGS` (None: offered)."""
    if region in TRAINIUM_OFFERINGS:
        return None
    return (
        f"no Trainium instance type is offered there (trainium_job/instances.py TRAINIUM_OFFERINGS: "
        f"{', '.join(TRAINIUM_OFFERINGS)}); use one of those regions with its AZ IDs"
    )


def az_offering_problem(instance_type: str, region: str, az_id: str) -> str | None:
    """Why ``az_id`` of ``region`` is not known to offer ``instance_type`` (None: it is, or the
    table lists no AZ IDs for that type)."""
    known = TRAINIUM_OFFERINGS.get(region)
    if not known or not instance_type.startswith(_AZ_LISTED_FAMILY) or az_id in known:
        return None
    return (
        f"{instance_type} is known to be offered in {', '.join(known)} of {region} only "
        "(trainium_job/instances.py TRAINIUM_OFFERINGS); `make doctor` checks the account's offerings"
    )
