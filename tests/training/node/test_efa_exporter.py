"""The EFA exporter and counter reader, on a sysfs tree laid out as the kernel's efa driver does."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from training.node.efa_counters import bytes_moved, device_counters, devices, port_counters
from training.node.efa_exporter import registry
from trainium_job.efa_counter_names import BYTE_COUNTERS


def fake_efa(
    root: Path, device: str, port: dict[str, int], device_level: dict[str, int] | None = None
) -> None:
    """``<root>/<device>/ports/1/hw_counters/<name>`` files as efa_verbs.c names them."""
    port_dir = root / device / "ports" / "1" / "hw_counters"
    port_dir.mkdir(parents=True)
    for name, value in {**port, "lifespan": 10}.items():
        (port_dir / name).write_text(f"{value}\n")
    dev_dir = root / device / "hw_counters"
    dev_dir.mkdir()
    for name, value in (device_level or {}).items():
        (dev_dir / name).write_text(f"{value}\n")


def test_given_two_devices_then_each_port_counter_is_read_and_lifespan_is_not(tmp_path):
    fake_efa(tmp_path, "rdmap16s27", {"tx_bytes": 100, "rx_bytes": 50, "rdma_write_bytes": 7})
    fake_efa(tmp_path, "rdmap32s27", {"tx_bytes": 1, "rx_drops": 3}, {"cmds_err": 2})
    (tmp_path / "mlx5_0").mkdir()  # a device without EFA port counters is not EFA's
    assert devices(tmp_path) == ["rdmap16s27", "rdmap32s27"]
    counters = port_counters(tmp_path)
    assert counters[("rdmap16s27", "1", "tx_bytes")] == 100
    assert ("rdmap16s27", "1", "lifespan") not in counters
    assert device_counters(tmp_path) == {("rdmap32s27", "cmds_err"): 2}
    assert bytes_moved(tmp_path) == 100 + 50 + 7 + 1
    assert set(BYTE_COUNTERS) >= {"tx_bytes", "rx_bytes", "rdma_read_bytes", "rdma_write_bytes"}


def test_given_counters_then_a_scrape_shows_them_as_prometheus_counters(tmp_path):
    fake_efa(tmp_path, "rdmap16s27", {"tx_bytes": 100, "rdma_read_bytes": 9}, {"cmds_err": 2})
    text = generate_latest(registry(tmp_path)).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["efa_tx_bytes"].type == "counter"
    (sample,) = [s for s in families["efa_tx_bytes"].samples if s.name == "efa_tx_bytes_total"]
    assert sample.labels == {"device": "rdmap16s27", "port": "1"} and sample.value == 100
    assert "efa_rdma_read_bytes_total" in text
    assert 'efa_device_cmds_err_total{device="rdmap16s27"} 2.0' in text
    assert "efa_devices 1.0" in text


def test_given_no_infiniband_class_then_zero_devices_and_no_counters(tmp_path):
    text = generate_latest(registry(tmp_path / "absent")).decode()
    assert "efa_devices 0.0" in text and "efa_tx_bytes" not in text
