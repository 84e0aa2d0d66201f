"""The FSx capacity exporter: statvfs of the mount, in bytes and inodes."""

from __future__ import annotations

import os

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from training.node.fsx_exporter import registry


def test_given_a_mount_then_size_and_available_bytes_are_those_of_statvfs(tmp_path):
    values = {
        s.name: s
        for f in text_string_to_metric_families(generate_latest(registry(str(tmp_path))).decode())
        for s in f.samples
    }
    st = os.statvfs(tmp_path)
    assert values["fsx_filesystem_size_bytes"].value == st.f_blocks * st.f_frsize
    assert values["fsx_filesystem_size_bytes"].labels == {"mountpoint": str(tmp_path)}
    assert 0 < values["fsx_filesystem_avail_bytes"].value <= values["fsx_filesystem_size_bytes"].value
    assert values["fsx_filesystem_files"].value == st.f_files
    assert "fsx_filesystem_files_free" in values
