"""EFA and huge pages: the training pods request none and tell libfabric not to use them.

The evidence:

* libfabric's EFA provider allocates its internal packet buffers from 2 MiB huge pages unless
  told not to (``FI_EFA_USE_HUGE_PAGE``: "Using huge page memory has a small performance
  advantage, but can cause system to run out of huge page memory. By default, EFA provider will
  use huge page"; ofiwg/libfabric v2.6.0 ``prov/efa/src/efa_env.c``); when the ``mmap`` of huge
  pages fails it falls back to regular pages for good (``prov/util/src/util_buf.c``). The
  training data itself moves by RDMA from registered regular memory either way.
* A pod that requests no ``hugepages-2Mi`` gets a hugetlb cgroup limit of 0. Whether an
  over-limit huge page then fails at ``mmap`` (clean fallback) or at first touch (SIGBUS) depends
  on the node's cgroup reservation accounting, which was not confirmed for the AL2023 Neuron AMI.
* Requesting huge pages instead (the EKS EFA guide's examples request ``hugepages-2Mi``) needs
  the node to pre-allocate them; that the AL2023 Neuron AMI does is NOT confirmed (see
  :data:`trainium_job.node_facts.EFA_HUGE_PAGES`), and a request on a node with none
  allocatable leaves the gang Pending forever. The Neuron EKS samples
  (aws-neuron/aws-neuron-eks-samples) request none.

So the pods request no huge pages and set ``FI_EFA_USE_HUGE_PAGE=0``: the provider never tries
them, whatever the node pre-allocated, at the cost of the "small performance advantage" on its
own buffers. The allocatable model still assumes the node reserves them (the conservative case).
"""

from __future__ import annotations

from typing import Final

#: libfabric's switch (``fi_param_define(&efa_prov, "use_huge_page", FI_PARAM_BOOL, ...)``,
#: read as ``FI_EFA_USE_HUGE_PAGE``): 0 = regular pages for the provider's buffers.
HUGE_PAGE_ENV: Final = {"FI_EFA_USE_HUGE_PAGE": "0"}
