"""The fabric check: verdicts on recorded results, the measurement on CPU, the worker's shell lines."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.training.conftest import PYTHON, REPO, child_env, free_port
from tests.training.node.test_efa_exporter import fake_efa
from training.node.fabric_check import bus_bandwidth_gbps, judge, read_result, write_result
from trainium_job.fabric_check_steps import (
    EXIT_CODE,
    NOT_MEASURED_EXIT_CODE,
    FabricCheck,
    measure_args,
    title,
    verdict_args,
)
from trainium_job.launch import LaunchSpec
from trainium_job.pod_program import MODULE, JobDescription, Phase, dumps
from trainium_job.pod_program import FabricCheck as DescribedCheck

RECORDED = Path(__file__).parent / "data" / "fabric_check"


def recorded(name: str) -> dict:
    return json.loads((RECORDED / f"{name}.json").read_text())


def test_given_the_recorded_success_then_it_passes_naming_node_bandwidth_and_duration():
    v = judge(recorded("success"), min_busbw_gbps=10, nodes=2, seconds=41)
    assert v.passed
    assert v.line == (
        "fabric check passed on node ip-10-0-1-23.us-west-2.compute.internal in 41 s: all-reduce bus "
        "bandwidth 39.2 GB/s (floor 10), 5.37 GB over 8 EFA devices"
    )


@pytest.mark.parametrize(
    "name, expected, code",
    [
        (
            "low_bandwidth",
            "ip-10-0-1-57.us-west-2.compute.internal after 38 s: all-reduce bus bandwidth 3.2 GB/s is below "
            "the floor of 10 GB/s",
            EXIT_CODE,
        ),
        (
            "tcp_fallback",
            "0 bytes crossed EFA during an all-reduce that moves at least 1,342,177,280 between nodes",
            EXIT_CODE,
        ),
        (
            "tool_missing",
            "could not measure (ModuleNotFoundError: No module named 'torch_xla')",
            NOT_MEASURED_EXIT_CODE,
        ),
    ],
)
def test_given_a_recorded_failure_then_one_line_names_the_node_and_the_cause(name, expected, code):
    v = judge(recorded(name), min_busbw_gbps=10, nodes=2, seconds=38)
    assert not v.passed and v.exit_code == code
    assert v.line.startswith("fabric check FAILED on node ip-10-0-1-")
    assert expected in v.line
    assert "\n" not in v.line


def test_given_a_measurement_broken_off_by_a_lost_pod_then_no_abort_but_a_restart():
    """What the offline rehearsal saw on the pod that stayed when the other was deleted during the
    all-reduce (gloo's error, one second later): the Job must restart, not abort."""
    lost_peer = (
        "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection "
        "closed by peer [10.244.0.11]:63166. This is typically caused by a remote worker crashing."
    )
    v = judge({**recorded("success"), "error": lost_peer}, min_busbw_gbps=10, nodes=2, seconds=13)
    assert v.exit_code == NOT_MEASURED_EXIT_CODE != EXIT_CODE
    assert v.line.startswith(
        "fabric check FAILED on node ip-10-0-1-23.us-west-2.compute.internal after 13 s: "
    )
    assert "could not measure (RuntimeError:" in v.line


def test_given_a_broken_off_measurement_on_a_node_without_efa_then_the_fabric_verdict_stands():
    broken = {**recorded("tool_missing"), "efa_devices": 0}
    v = judge(broken, min_busbw_gbps=10, nodes=2, seconds=1)
    assert v.exit_code == EXIT_CODE and "no EFA device" in v.line
    v = judge({**recorded("tool_missing"), "provider": "tcp"}, min_busbw_gbps=10, nodes=2, seconds=1)
    assert v.exit_code == EXIT_CODE and "FI_PROVIDER is 'tcp'" in v.line


def test_given_another_provider_or_no_efa_device_then_it_fails():
    assert (
        "FI_PROVIDER is 'tcp'"
        in judge({**recorded("success"), "provider": "tcp"}, min_busbw_gbps=10, nodes=2, seconds=1).line
    )
    assert (
        "no EFA device"
        in judge({**recorded("success"), "efa_devices": 0}, min_busbw_gbps=10, nodes=2, seconds=1).line
    )


def test_given_a_zero_floor_then_only_the_efa_path_is_checked():
    assert judge(recorded("low_bandwidth"), min_busbw_gbps=0, nodes=2, seconds=1).passed
    assert not judge(recorded("tcp_fallback"), min_busbw_gbps=0, nodes=2, seconds=1).passed


def test_given_no_result_then_it_fails_naming_this_node(monkeypatch):
    monkeypatch.setenv("NODE_NAME", "ip-10-0-1-99")
    v = judge(None, min_busbw_gbps=10, nodes=2, seconds=3)
    assert v.line == "fabric check FAILED on node ip-10-0-1-99 after 3 s: it wrote no result"
    assert v.exit_code == NOT_MEASURED_EXIT_CODE


@pytest.mark.parametrize("text", ["", '{"node": "ip-10-0-1-99", "provid', "[]"])
def test_given_a_result_file_not_written_whole_then_the_verdict_is_not_measured(tmp_path, text):
    path = tmp_path / "result.json"
    path.write_text(text)
    unmeasured = _verdict(path)
    assert unmeasured.returncode == NOT_MEASURED_EXIT_CODE, unmeasured.stderr
    assert unmeasured.stderr.strip().endswith("it wrote no result")


def test_given_a_result_then_it_is_written_whole_under_its_name_and_read_back(tmp_path):
    path = tmp_path / "result.json"
    path.write_text("stale")
    write_result(path, {"node": "n1", "iters": 3})
    assert read_result(path) == {"node": "n1", "iters": 3}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json"]  # no partial file left
    assert read_result(tmp_path / "absent.json") is None


def test_given_nccom_test_figures_then_the_bus_bandwidth_formula_matches():
    # nccom-test.rst v2.29.1 L691-L728: 1 GiB over 64 ranks in 41806 us -> busbw 47.09, at 128 MiB in 6279 us -> 39.19.
    assert bus_bandwidth_gbps(1024**3, 41806e-6, 64) == pytest.approx(47.09, abs=0.01)
    assert bus_bandwidth_gbps(128 * 1024**2, 6279e-6, 64) == pytest.approx(39.19, abs=0.01)


def _verdict(path: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            PYTHON,
            "-m",
            "training.node.fabric_check",
            "verdict",
            str(path),
            "--min_busbw_gbps",
            "10",
            "--nodes",
            "2",
            *extra,
        ],
        cwd=REPO,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_given_the_verdict_command_then_its_exit_code_is_the_jobs_abort_code():
    ok = _verdict(RECORDED / "success.json", "--seconds", "41")
    assert ok.returncode == 0 and "passed" in ok.stdout
    bad = _verdict(RECORDED / "tcp_fallback.json")
    assert bad.returncode == EXIT_CODE == 69
    assert bad.stderr.count("\n") == 1 and "TCP fallback" in bad.stderr
    unmeasured = _verdict(RECORDED / "tool_missing.json")
    assert unmeasured.returncode == NOT_MEASURED_EXIT_CODE == 75
    assert unmeasured.stderr.count("\n") == 1 and "could not measure" in unmeasured.stderr


def test_given_two_cpu_workers_with_flat_efa_counters_then_measure_records_and_verdict_refuses(tmp_path):
    """The real measurement under torchrun (gloo): it times the all-reduce; the fake EFA counters
    do not move, as on a node whose collectives went over sockets."""
    sysfs = tmp_path / "infiniband"
    fake_efa(sysfs, "rdmap16s27", {"tx_bytes": 5, "rx_bytes": 5})
    result = tmp_path / "result.json"
    proc = subprocess.run(
        [
            PYTHON,
            "-m",
            "torch.distributed.run",
            "--nnodes",
            "1",
            "--nproc_per_node",
            "2",
            "--rdzv_backend",
            "c10d",
            "--rdzv_endpoint",
            f"127.0.0.1:{free_port()}",
            "-m",
            "training.node.fabric_check",
            "measure",
            "--result_file",
            str(result),
            "--size_mib",
            "1",
            "--iters",
            "3",
            "--warmup",
            "1",
            "--sysfs",
            str(sysfs),
        ],
        cwd=REPO,
        env=child_env(FI_PROVIDER="efa", NODE_NAME="cpu-node"),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(result.read_text())
    assert got["node"] == "cpu-node" and got["world_size"] == 2 and got["efa_devices"] == 1
    assert got["efa_bytes"] == 0 and got["busbw_gbps"] > 0 and "error" not in got
    v = judge(got, min_busbw_gbps=0, nodes=2, seconds=1)
    assert not v.passed and "not on EFA" in v.line


def test_given_the_described_check_then_a_stand_in_torchrun_leads_to_the_verdicts_exit_code(tmp_path):
    """The check as the pod program runs it from the job's description, torchrun replaced by a
    stand-in that leaves a recorded result (the offline rehearsal does the same); training never
    starts."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    result = tmp_path / "fabric.json"
    stand_in = bin_dir / "torchrun"
    stand_in.write_text(f"#!/bin/sh\ncp {RECORDED / 'low_bandwidth.json'} {result}\nexit 1\n")
    stand_in.chmod(0o755)
    (bin_dir / "python").symlink_to(PYTHON)
    spec = LaunchSpec(nnodes=2, nproc_per_node=32, rdzv_endpoint="job-worker-0.job:29400", rdzv_id="job")
    check = FabricCheck()
    described = JobDescription(
        job="job",
        nodes=2,
        phases=(
            Phase(
                name="phase 1",
                run_dir=str(tmp_path / "run"),
                complete_marker=str(tmp_path / "run" / "COMPLETE"),
                train=("touch", str(tmp_path / "trained")),
            ),
        ),
        fabric_check=DescribedCheck(
            measure=tuple(measure_args(spec, check, result_file=str(result))),
            verdict=tuple(verdict_args(check, nodes=2, result_file=str(result))),
            result_file=str(result),
            title=title(spec, check),
        ),
        ledger=False,
    )
    env = child_env(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.run(
        [PYTHON, "-m", MODULE, dumps(described)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == EXIT_CODE
    assert "fabric check: all-reduce across 2 nodes, floor 10 GB/s" in proc.stdout
    assert "below the floor of 10 GB/s" in proc.stderr and not (tmp_path / "trained").exists()
