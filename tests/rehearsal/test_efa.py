"""The stand-in EFA device: its layout as the fabric check reads it, and its counters following a
pod's eth0."""

from __future__ import annotations

import os

import pytest

from tests.rehearsal import efa
from training.node.efa_counters import bytes_moved, devices, port_counters


def test_given_a_node_then_its_device_is_what_the_fabric_check_reads_from_sysfs(tmp_path):
    counters = efa.make_device(tmp_path)
    infiniband = tmp_path / "infiniband"  # bound at /sys/class: /sys/class/infiniband in the pod
    assert devices(infiniband) == [efa.DEVICE]
    assert port_counters(infiniband) == {(efa.DEVICE, "1", "tx_bytes"): 0, (efa.DEVICE, "1", "rx_bytes"): 0}
    (counters / "tx_bytes").write_text("5\n")
    assert efa.make_device(tmp_path) == counters and bytes_moved(infiniband) == 5  # kept when made again


def test_given_this_process_then_eth0_bytes_reads_its_network_namespace_or_says_none():
    dev = open("/proc/self/net/dev").read()
    got = efa.eth0_bytes(os.getpid())
    assert (got is None) == ("eth0:" not in dev)
    assert efa.eth0_bytes(2**22 + 1) is None  # above pid_max's default: no such process


def test_given_traffic_then_the_counters_grow_by_it_and_stand_still_when_not_following(tmp_path, monkeypatch):
    counters = efa.make_device(tmp_path)
    seen = {"rx_bytes": 100, "tx_bytes": 1000}
    monkeypatch.setattr(efa, "eth0_bytes", lambda pid: dict(seen) if pid == 7 else None)
    fabric = efa.FabricCounters()
    fabric.watch(7, counters)
    seen.update(rx_bytes=150, tx_bytes=1400)
    fabric.update()
    assert bytes_moved(tmp_path / "infiniband") == 50 + 400
    fabric.follow = False
    seen.update(rx_bytes=900, tx_bytes=9000)
    fabric.update()
    assert bytes_moved(tmp_path / "infiniband") == 450
    assert not [p.name for p in counters.iterdir() if p.name.startswith(".")]  # no partial file left
    fabric.close()


def test_given_the_pod_ended_then_it_is_no_longer_watched_and_its_node_keeps_the_count(tmp_path, monkeypatch):
    counters = efa.make_device(tmp_path)
    monkeypatch.setattr(efa, "eth0_bytes", lambda pid: None)
    fabric = efa.FabricCounters()
    fabric.watch(7, counters)
    (counters / "tx_bytes").write_text("42\n")
    fabric.update()
    assert fabric._pods == {} and (counters / "tx_bytes").read_text() == "42\n"
    fabric.close()


@pytest.mark.parametrize("name", efa.COUNTERS)
def test_given_the_counters_then_they_are_byte_counters_of_the_fabric_check(name):
    from trainium_job.efa_counter_names import BYTE_COUNTERS

    assert name in BYTE_COUNTERS
