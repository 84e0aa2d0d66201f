"""libfabric and its EFA provider: the ``FI_*`` environment variables.

Version: the libfabric of the EFA installer the Neuron training image runs at build
(``efa_installer.sh -y -g --skip-kmod ...`` on ``aws-efa-installer-latest``; installers 1.47/1.48,
libfabric 2.4.x amzn builds). The variables below are defined identically in ofiwg/libfabric
v2.4.0, v2.5.0 and v2.6.0 (``prov/efa/src/efa_env.c``); lines cited at v2.6.0. libfabric maps
``FI_<PROVIDER>_<NAME>`` to ``fi_param_define(&<provider>, "<name>", ...)``.
"""

from __future__ import annotations

from tests.contracts.model import Contract, Entry

_SRC = "ofiwg/libfabric@v2.6.0"
_MAN = "fi_efa(7) (ofiwg/libfabric man/fi_efa.7.md)"
#: libfabric's boolean parameters (fi_param_get_bool: 0/1, true/false, yes/no, on/off).
BOOLEAN = ("0", "1", "true", "false", "yes", "no", "on", "off")

CONTRACT = Contract(
    consumer="libfabric (core and EFA provider)",
    version="2.4.x-2.6.0 (EFA installer in the Neuron training image)",
    entries=(
        Entry(
            "FI_PROVIDER",
            "restricts provider selection to the named providers",
            f"{_SRC}:src/fabric.c:945-947 (core parameter 'provider')",
            values=("efa",),
        ),
        Entry(
            "FI_EFA_USE_DEVICE_RDMA",
            "1: use the device's RDMA; aborts if the device has none. Unset: RDMA when available",
            f"{_SRC}:prov/efa/src/efa_env.c:172; prov/efa/src/rdm/efa_rdm_util.c:54; {_MAN}",
            values=BOOLEAN,
        ),
        Entry(
            "FI_EFA_FORK_SAFE",
            "enables fork support and disables huge pages; no effect where the kernel copies "
            "registered pages on fork (5.13+ with rdma-core 35+: fork support 'UNNEEDED', the "
            "variable is not even read). Neuron: 'only required when running on AL2'",
            f"{_SRC}:prov/efa/src/efa_env.c:228; prov/efa/src/efa_fork_support.c "
            "(efa_fork_support_request_initialize); Neuron 'Setup Trn1 multi-node execution' (v2.29.0)",
            values=BOOLEAN,
        ),
        Entry(
            "FI_EFA_USE_HUGE_PAGE",
            "whether the provider's internal buffers use huge pages (default: yes unless fork "
            "support is on; falls back to regular pages when huge pages cannot be mapped)",
            f"{_SRC}:prov/efa/src/efa_env.c:234; prov/util/src/util_buf.c:70-88",
            values=BOOLEAN,
        ),
        Entry(
            "FI_EFA_ENABLE_SHM_TRANSFER",
            "use the SHM provider between processes on the same node (default 1)",
            f"{_SRC}:prov/efa/src/efa_env.c:182",
        ),
    ),
)
