"""What the EKS AL2023 Neuron AMI's kubelet keeps for itself on a Trainium node: the one table
of the node facts that :func:`trainium_job.allocatable.node_allocatable` reads.

Every figure is cited beside it. The kubelet configuration is written at boot by ``nodeadm``
(awslabs/amazon-eks-ami, tag v20260724, ``nodeadm/internal/kubelet/config.go``): kube-reserved
CPU and memory from the pod count, an eviction threshold, no system-reserved. The pod count is
nodeadm's own formula over the instance's network limits (``eni_max_pods.go``,
``instance-info.jsonl``). What the AMI does not publish is the memory the kernel reports
(MemTotal) on a trn1/trn2: the model below is Karpenter's documented estimate, which public
reports show to be low for trn1.32xlarge (conservative: pods sized from it fit).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class NodeNetworkFacts:
    """The network limits nodeadm computes the pod count from.

    Attributes:
        default_enis: ENIs on the default network card (nodeadm counts only those, although a
            Trainium node's other cards carry EFA interfaces).
        ipv4_per_eni: IPv4 addresses per ENI.
    """

    default_enis: int
    ipv4_per_eni: int

    @property
    def max_pods(self) -> int:
        """nodeadm's ``calculateStandardMaxPods``: ENIs x (IPs per ENI - 1) + 2, with no cap."""
        return self.default_enis * (self.ipv4_per_eni - 1) + 2


#: Instance type -> its row of nodeadm's ``instance-info.jsonl`` (awslabs/amazon-eks-ami v20260724,
#: ``nodeadm/internal/kubelet/instance-info.jsonl``; ``defaultMaxENIs``, ``ipv4AddressesPerInterface``).
#: trn1.2xlarge's 58 pods match a recorded node's ``Capacity: pods: 58`` (EKS AL2023, 2026).
NODE_NETWORK_FACTS: Final[dict[str, NodeNetworkFacts]] = {
    "trn1.2xlarge": NodeNetworkFacts(default_enis=4, ipv4_per_eni=15),
    "trn1.32xlarge": NodeNetworkFacts(default_enis=5, ipv4_per_eni=50),
    "trn1n.32xlarge": NodeNetworkFacts(default_enis=5, ipv4_per_eni=50),
    "trn2.48xlarge": NodeNetworkFacts(default_enis=2, ipv4_per_eni=50),
}

#: Share of the nominal memory the model takes off for the hypervisor, firmware and kernel:
#: Karpenter's default ``VM_MEMORY_OVERHEAD_PERCENT`` = 0.075 (aws/karpenter-provider-aws
#: ``pkg/operator/options/options.go``; its settings reference "default = 0.075, which equals to
#: 7.5%"). No public MemTotal of a trn1.32xlarge was found; Karpenter's resulting trn1.32xlarge
#: allocatable, 481894Mi, is reported ~22 GiB BELOW the real node's (aws/karpenter-provider-aws
#: issue #6509, 2024-07): pods sized from this model fit with room to spare.
VM_MEMORY_OVERHEAD_FRACTION: Final = 0.075

#: nodeadm's default ``evictionHard`` ``memory.available: 100Mi`` (config.go, default kubelet config).
EVICTION_HARD_MEMORY_MIB: Final = 100

#: nodeadm's ``getMemoryMebibytesToReserve``: kube-reserved memory = 11 MiB per pod + 255 MiB.
KUBE_RESERVED_MIB_PER_POD: Final = 11
KUBE_RESERVED_MIB_BASE: Final = 255

#: nodeadm's ``getCPUMillicoresToReserve``: (range start, range end, share in 1/10000) over the
#: node's millicores: 6% of the first core, 1% of the second, 0.5% of cores 3-4, 0.25% of the
#: rest. Integer arithmetic per range, as ``getResourceToReserveInRange`` does.
KUBE_RESERVED_CPU_RANGES: Final = ((0, 1000, 600), (1000, 2000, 100), (2000, 4000, 50), (4000, None, 25))

#: 2 MiB huge pages the node may pre-allocate for EFA: "Amazon EC2 instances with the EFA driver
#: installed pre-allocate 5128 2MiB Huge Pages" (EKS user guide, "Run machine learning training
#: on Amazon EKS with Elastic Fabric Adapter", ``ml/node-efa.adoc``). Whether the AL2023 Neuron
#: AMI does (its EFA install is ``efa_installer.sh --minimal``; nothing in ``templates/al2023``
#: or ``nodeadm`` sets ``nr_hugepages``) is NOT confirmed: the model assumes it does, the
#: conservative case. The kubelet takes pre-allocated huge pages out of allocatable memory
#: (kubernetes/kubernetes ``pkg/kubelet/nodestatus/setters.go``, ``MachineInfo``: "for every huge
#: page reservation, we need to remove it from allocatable memory").
EFA_HUGE_PAGES: Final = 5128
HUGE_PAGE_MIB: Final = 2


def network_facts(instance_type: str) -> NodeNetworkFacts:
    """The network row of ``instance_type``; ``KeyError`` naming the known types otherwise."""
    try:
        return NODE_NETWORK_FACTS[instance_type]
    except KeyError:
        raise KeyError(
            f"no node facts for {instance_type!r}; known: {', '.join(NODE_NETWORK_FACTS)}"
        ) from None
