"""EFA hardware counters from sysfs: what the Linux ``efa`` driver exposes for each device and port.

The driver registers port counters under ``/sys/class/infiniband/<device>/ports/<port>/hw_counters/``
and device counters under ``/sys/class/infiniband/<device>/hw_counters/`` (Linux
drivers/infiniband/hw/efa/efa_verbs.c, ``EFA_DEFINE_PORT_STATS`` / ``EFA_DEFINE_DEVICE_STATS``;
the RDMA core adds ``lifespan``, the refresh interval in ms, which is not a counter). EFA has no
``ports/<port>/counters/`` directory (the driver has no ``process_mad``), which is why
node_exporter's infiniband collector exports no EFA byte counters. Standard library only: the
EFA exporter and the fabric check both read it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

from trainium_job.efa_counter_names import BYTE_COUNTERS

#: Where the kernel lists RDMA devices (EFA devices are named ``efa_N``, or ``rdmapNsM`` once udev
#: renames them on the EKS AMIs).
SYSFS_ROOT: Final = Path("/sys/class/infiniband")
#: Not a counter: the RDMA core's refresh interval of the values.
NOT_COUNTERS: Final = frozenset({"lifespan"})
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def _read(directory: Path) -> dict[str, int]:
    values: dict[str, int] = {}
    if not directory.is_dir():
        return values
    for path in sorted(directory.iterdir()):
        if path.name in NOT_COUNTERS or not _NAME.match(path.name):
            continue
        try:
            values[path.name] = int(path.read_text().strip())
        except (OSError, ValueError):  # a counter the device could not read this time
            continue
    return values


def devices(root: Path = SYSFS_ROOT) -> list[str]:
    """RDMA devices that have EFA port counters (names sorted)."""
    if not root.is_dir():
        return []
    return sorted(d.name for d in root.iterdir() if any((d / "ports").glob("*/hw_counters")))


def port_counters(root: Path = SYSFS_ROOT) -> dict[tuple[str, str, str], int]:
    """(device, port, counter) -> value of every port counter found."""
    out: dict[tuple[str, str, str], int] = {}
    for device in devices(root):
        for port_dir in sorted((root / device / "ports").iterdir()):
            for name, value in _read(port_dir / "hw_counters").items():
                out[(device, port_dir.name, name)] = value
    return out


def device_counters(root: Path = SYSFS_ROOT) -> dict[tuple[str, str], int]:
    """(device, counter) -> value of every device-level counter found."""
    out: dict[tuple[str, str], int] = {}
    for device in devices(root):
        for name, value in _read(root / device / "hw_counters").items():
            out[(device, name)] = value
    return out


def bytes_moved(root: Path = SYSFS_ROOT) -> int:
    """Sum of the byte counters of every port (see :data:`BYTE_COUNTERS`)."""
    return sum(v for (_, _, name), v in port_counters(root).items() if name in BYTE_COUNTERS)
