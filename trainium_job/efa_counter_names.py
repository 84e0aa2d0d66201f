"""The EFA counter names the Linux ``efa`` driver exposes: what the EFA exporter reads and exports,
what the fabric check sums, and what the platform's dashboard and alerts query.

Standard library only, so the CDK app (synth) and the training and tools images share one list.
Source: Linux drivers/infiniband/hw/efa/efa_verbs.c (``EFA_DEFINE_PORT_STATS`` /
``EFA_DEFINE_DEVICE_STATS``).
"""

from __future__ import annotations

from typing import Final

#: Port counters in the driver (efa_verbs.c ``EFA_DEFINE_PORT_STATS``): the first 13 since the
#: port/device split, the RDMA write ones with EFA RDMA write support, the retransmission ones
#: later. A kernel exports the ones it knows; names not listed here are exported too.
PORT_COUNTERS: Final = (
    "tx_bytes",
    "tx_pkts",
    "rx_bytes",
    "rx_pkts",
    "rx_drops",
    "send_bytes",
    "send_wrs",
    "recv_bytes",
    "recv_wrs",
    "rdma_read_wrs",
    "rdma_read_bytes",
    "rdma_read_wr_err",
    "rdma_read_resp_bytes",
    "rdma_write_wrs",
    "rdma_write_bytes",
    "rdma_write_wr_err",
    "rdma_write_recv_bytes",
    "retrans_bytes",
    "retrans_pkts",
    "retrans_timeout_events",
    "unresponsive_remote_events",
    "impaired_remote_conn_events",
)
#: Port counters that count bytes on the wire in either direction, by any path (two-sided sends,
#: RDMA reads and writes): a collective that crossed EFA moved some of them.
BYTE_COUNTERS: Final = (
    "tx_bytes",
    "rx_bytes",
    "rdma_read_bytes",
    "rdma_read_resp_bytes",
    "rdma_write_bytes",
    "rdma_write_recv_bytes",
)
