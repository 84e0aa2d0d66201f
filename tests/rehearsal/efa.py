"""The stand-in EFA device of each rehearsal node, and the thread that keeps its byte counters.

A node's device is a folder laid out as the Linux ``efa`` driver's sysfs entry
(``<class>/infiniband/<device>/ports/1/hw_counters/``, with the counters
``training.node.efa_counters`` sums), bound over ``/sys/class`` in the node's gang pod. Its ``tx_bytes``
and ``rx_bytes`` follow the bytes that really left and reached the pod over its ``eth0``: the
pod's link to the other pods (traffic between its own workers stays on its loopback, as it stays
on the node on Trainium). So the fabric check's "bytes crossed EFA" test sees the all-reduce's
traffic between the nodes, and nothing when :attr:`FabricCounters.follow` is off (a fallback to
TCP sockets: the bytes go another way, the EFA counters stand still).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from training.node.efa_counters import SYSFS_ROOT

#: The device's name: the EKS AMIs' udev names EFA devices ``rdmap<bus>s<slot>``
#: (``training.node.efa_counters``); this is the first of a trn1.32xlarge's eight.
DEVICE = "rdmap16s27"
PORT = "1"
#: The counters kept: the pod's eth0 bytes sent and received.
COUNTERS = ("tx_bytes", "rx_bytes")
#: Seconds between two updates of the counters.
INTERVAL_S = 0.1
#: Where the device folder sits below the folder bound at /sys/class.
CLASS_PATH = SYSFS_ROOT.relative_to("/sys/class")


def make_device(sys_class: Path) -> Path:
    """The device's counters folder under ``sys_class`` (created with zeros if absent)."""
    counters = sys_class / CLASS_PATH / DEVICE / "ports" / PORT / "hw_counters"
    if not counters.is_dir():
        counters.mkdir(parents=True)
        for name in COUNTERS:
            (counters / name).write_text("0\n")
    return counters


#: A port's states as the efa driver reports an up link, in the Linux RDMA core's format
#: (``training.node.health_check`` PORT_ACTIVE, PHYS_LINK_UP cite both).
PORT_STATES = {"state": "4: ACTIVE\n", "phys_state": "5: LinkUp\n"}


def make_devices(sys_class: Path, count: int) -> list[Path]:
    """``count`` devices under ``sys_class`` (:data:`DEVICE` first, then the next names of the
    ``rdmap<bus>s27`` series), each port ACTIVE and LinkUp: a node's EFA devices for the deep
    check, which counts them and reads their ports' states."""
    ports = []
    for i in range(count):
        port = sys_class / CLASS_PATH / f"rdmap{16 + 16 * i}s27" / "ports" / PORT
        (port / "hw_counters").mkdir(parents=True, exist_ok=True)
        for name in COUNTERS:
            (port / "hw_counters" / name).write_text("0\n")
        for name, value in PORT_STATES.items():
            (port / name).write_text(value)
        ports.append(port)
    return ports


def eth0_bytes(pid: int) -> dict[str, int] | None:
    """``{"tx_bytes": sent, "rx_bytes": received}`` of ``eth0`` in the network namespace of
    process ``pid`` (``/proc/<pid>/net/dev``), or None when the process or the interface is gone."""
    try:
        lines = Path(f"/proc/{pid}/net/dev").read_text().splitlines()
    except OSError:
        return None
    for line in lines[2:]:
        name, _, values = line.partition(":")
        if name.strip() == "eth0":
            fields = values.split()  # 8 receive columns, then 8 transmit ones; bytes first
            return {"rx_bytes": int(fields[0]), "tx_bytes": int(fields[8])}
    return None


def _write(counters: Path, name: str, value: int) -> None:
    """Replace one counter file at once (a reader never sees it half written)."""
    partial = counters / f".{name}.partial"  # not a counter name: training.node.efa_counters skips it
    partial.write_text(f"{value}\n")
    os.replace(partial, counters / name)


@dataclass
class _Watched:
    counters: Path
    last: dict[str, int]


@dataclass
class FabricCounters:
    """Adds each watched pod's eth0 traffic to its node's EFA counters every :data:`INTERVAL_S`."""

    follow: bool = True
    _pods: dict[int, _Watched] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def watch(self, pid: int, counters: Path) -> None:
        """Count the traffic of the pod whose PID 1 is ``pid`` (from now on) into ``counters``."""
        with self._lock:
            self._pods[pid] = _Watched(counters, eth0_bytes(pid) or dict.fromkeys(COUNTERS, 0))
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="efa-counters", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(INTERVAL_S):
            self.update()

    def update(self) -> None:
        with self._lock:
            for pid, watched in list(self._pods.items()):
                now = eth0_bytes(pid)
                if now is None:  # the pod ended: its node keeps what it counted
                    del self._pods[pid]
                    continue
                if self.follow:
                    for name in COUNTERS:
                        grown = now[name] - watched.last[name]
                        if grown > 0:
                            _write(watched.counters, name, int((watched.counters / name).read_text()) + grown)
                watched.last = now

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
