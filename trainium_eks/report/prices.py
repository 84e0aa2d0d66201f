"""List prices of what the platform runs besides the Trainium nodes: the table the synth review's
``idle:`` line reads. Facts only (the arithmetic is :mod:`trainium_eks.report.review`'s).

Every row is a list price in us-east-1, checked 2026-11, on the AWS pricing page its ``source``
names, like the Trainium prices in :mod:`trainium_job.instances` (``on_demand_usd_per_hour``).
Other regions cost more or less; the review says which region the figures are for. Monthly prices
become hourly ones with :data:`HOURS_PER_MONTH` (730: 365 x 24 / 12, the month AWS's pricing
pages and Pricing Calculator use). Storage prices are per GB-month of provisioned capacity; the
review applies them to the provisioned GiB.

How far each figure was checked here, offline: the EKS control plane against AWS's own Containers
blog post on extended-support pricing ($0.10 standard, $0.60 extended); the NAT gateway's hour and
GB, the public IPv4 address, m7i.large, gp3, FSx SCRATCH_2 and PERSISTENT_2 at 125 MB/s/TiB
against third-party copies of the us-east-1 pages, which agree. NOT verified: FSx PERSISTENT_2 at
250, 500 and 1000 MB/s/TiB (only ap-northeast-1 figures were found): check them on the FSx for
Lustre pricing page before relying on them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

#: Hours in the month of AWS's monthly prices (365 days x 24 h / 12 months).
HOURS_PER_MONTH: Final = 730
#: Where and when the rows were read.
PRICE_BASIS: Final = "list price, us-east-1, checked 2026-11"


@dataclass(frozen=True)
class Price:
    """One row: ``usd`` per ``unit``, from ``source``.

    ``unit`` ends in ``-hour`` (charged per hour of one thing) or is ``GB-month`` (per GB of
    provisioned storage per month) or ``GB`` (per GB moved: not an hourly cost).
    """

    usd: float
    unit: str
    source: str

    @property
    def page(self) -> str:
        """The pricing page of the row (its source up to the colon)."""
        return self.source.split(":", 1)[0]

    def hourly(self, quantity: float = 1) -> float:
        """USD per hour of ``quantity`` things (GB for a ``GB-month`` price)."""
        if self.unit.endswith("-hour"):
            return quantity * self.usd
        if self.unit == "GB-month":
            return quantity * self.usd / HOURS_PER_MONTH
        raise ValueError(f"a price per {self.unit} has no hourly rate")


#: The EKS control plane, per cluster and hour, in standard support (a Kubernetes version in
#: extended support costs $0.60).
EKS_CONTROL_PLANE: Final = Price(0.10, "cluster-hour", "Amazon EKS pricing: cluster in standard support")
#: A NAT gateway, per hour it exists.
NAT_GATEWAY: Final = Price(0.045, "gateway-hour", "Amazon VPC pricing: NAT gateway, per hour")
#: Data a NAT gateway processes: depends on traffic (images from registries outside the region's
#: S3, the vocabulary download, S3 in other regions), so it is left out of the idle cost and named
#: as excluded, with what the created VPC's S3 gateway endpoint keeps off it (the review's
#: ``not counted:`` line).
NAT_DATA_PROCESSED: Final = Price(0.045, "GB", "Amazon VPC pricing: NAT gateway, per GB processed")
#: A public IPv4 address (each NAT gateway's Elastic IP), charged since 2024-02-01.
PUBLIC_IPV4: Final = Price(0.005, "address-hour", "Amazon VPC pricing: public IPv4 address, per hour")

#: EC2 on-demand, Linux, per instance-hour: the system nodes' type
#: (:data:`trainium_eks.versions.SYSTEM_NODE_INSTANCE_TYPE`; a test keeps it in this table), the
#: staging node's and the largest preparation node's (``DATASET_NODE_INSTANCE_TYPE``,
#: ``PREPARATION_NODES.largest``). m7i is priced per vCPU, $0.0504 an hour in every size: the
#: m7i.12xlarge row is 24 x m7i.large's, not read separately.
EC2_ON_DEMAND: Final = {
    "m7i.large": Price(0.1008, "instance-hour", "Amazon EC2 On-Demand pricing: m7i.large, Linux"),
    "m7i.xlarge": Price(0.2016, "instance-hour", "Amazon EC2 On-Demand pricing: m7i.xlarge, Linux"),
    "m7i.12xlarge": Price(2.4192, "instance-hour", "Amazon EC2 On-Demand pricing: m7i.12xlarge, Linux"),
}

#: FSx for Lustre PERSISTENT_2 (SSD) storage by throughput tier (MB/s per TiB). The 250, 500 and
#: 1000 rows are not verified (see the module docstring).
FSX_PERSISTENT_2: Final = {
    125: Price(0.145, "GB-month", "Amazon FSx for Lustre pricing: Persistent-2 SSD, 125 MB/s/TiB"),
    250: Price(0.210, "GB-month", "Amazon FSx for Lustre pricing: Persistent-2 SSD, 250 MB/s/TiB"),
    500: Price(0.340, "GB-month", "Amazon FSx for Lustre pricing: Persistent-2 SSD, 500 MB/s/TiB"),
    1000: Price(0.600, "GB-month", "Amazon FSx for Lustre pricing: Persistent-2 SSD, 1000 MB/s/TiB"),
}
#: FSx for Lustre SCRATCH_2 storage (its throughput is fixed).
FSX_SCRATCH_2: Final = Price(0.140, "GB-month", "Amazon FSx for Lustre pricing: Scratch-2 SSD")
#: EBS gp3 storage (3,000 IOPS and 125 MB/s included, which every volume here keeps).
EBS_GP3: Final = Price(0.08, "GB-month", "Amazon EBS pricing: gp3, per GB-month")

#: What the idle cost leaves out besides the NAT gateway's data (:data:`NAT_DATA_PROCESSED`):
#: charged by use, or a few dollars a month.
NOT_COUNTED: Final = (
    "CloudWatch logs",
    "KMS keys",
    "FSx backups",
    "ECR storage",
    "model bucket storage",
    "Amazon Managed Prometheus",
)


def fsx_storage(deployment_type: str, throughput_per_tib: int | None) -> Price:
    """The storage price of an FSx for Lustre file system of ``deployment_type`` (PERSISTENT_2 at
    ``throughput_per_tib``, which :func:`trainium_eks.storage.fsx.resolved_throughput` fills in)."""
    if deployment_type == "SCRATCH_2":
        return FSX_SCRATCH_2
    if (
        deployment_type == "PERSISTENT_2"
        and throughput_per_tib is not None
        and throughput_per_tib in FSX_PERSISTENT_2
    ):
        return FSX_PERSISTENT_2[throughput_per_tib]
    raise KeyError(f"no FSx price for {deployment_type} at {throughput_per_tib} MB/s/TiB")
