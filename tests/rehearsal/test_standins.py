"""The rehearsal's stand-ins on their own: what each prints, runs, records and refuses."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys

import pytest
import torch

from tests.rehearsal import standins, torch_xla_standin
from tests.rehearsal.cluster import RECORDED_HEALTH as RECORDED
from training.node import health_check
from trainium_job.instances import instance_facts


@pytest.fixture()
def root(tmp_path):
    source = tmp_path / "source.tar"
    source.write_bytes(b"shards" * 1000)
    config = {
        "s3_objects": {"s3://bucket/set.tar": str(source)},
        "sleep_scale": 0.001,
        "instance_type": "trn1.32xlarge",
        "dpkg_versions": {"aws-neuronx-runtime-lib": "2.31.24.0-0b044f4ce"},
        "neuron_ls": {"trn1.32xlarge": "neuron_ls.json"},
        "nccom_test": {"trn1.32xlarge": "nccom_test.txt"},
    }
    shutil.copy(RECORDED / "neuron_ls.trn1.32xlarge.json", tmp_path / "neuron_ls.json")
    shutil.copy(RECORDED / "nccom_test.r16_allr_show_algorithm.txt", tmp_path / "nccom_test.txt")
    (tmp_path / standins.CONFIG).write_text(json.dumps(config))
    return tmp_path


def test_given_a_trn1_32xlarge_then_neuron_ls_answers_its_recorded_json(root, capsys):
    assert standins.neuron_ls(["--json-output"], root) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed == json.loads((RECORDED / "neuron_ls.trn1.32xlarge.json").read_text())
    facts = instance_facts("trn1.32xlarge")
    assert len(listed) == facts.neuron_devices and sum(d["nc_count"] for d in listed) == facts.neuron_cores


def test_given_a_device_fault_on_its_node_then_neuron_ls_lists_a_device_fewer(root, capsys):
    config = json.loads((root / standins.CONFIG).read_text())
    faults = {socket.gethostname(): 1}
    (root / standins.CONFIG).write_text(json.dumps({**config, "device_faults": faults}))
    assert standins.neuron_ls(["--json-output"], root) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [d["neuron_device"] for d in listed] == list(range(15))


def test_given_an_instance_type_without_a_recording_then_neuron_ls_says_so_and_exits_1(root, capsys):
    config = json.loads((root / standins.CONFIG).read_text())
    (root / standins.CONFIG).write_text(json.dumps({**config, "instance_type": "trn2.48xlarge"}))
    assert standins.neuron_ls(["--json-output"], root) == 1
    assert "no recorded output for trn2.48xlarge" in capsys.readouterr().err


def test_given_the_table_form_then_neuron_ls_refuses_it(root, capsys):
    assert standins.neuron_ls([], root) == 2
    assert "only --json-output is rehearsed" in capsys.readouterr().err


def test_given_an_all_reduce_with_its_check_then_nccom_test_answers_the_recorded_run(root, capsys):
    argv = [
        "allr",
        "-r",
        "32",
        "-b",
        "32MB",
        "-e",
        "32MB",
        "-d",
        "fp32",
        "--check",
        "random",
        "--non-interactive",
    ]
    assert standins.nccom_test(argv, root) == 0
    assert capsys.readouterr().out == (RECORDED / "nccom_test.r16_allr_show_algorithm.txt").read_text()


def test_given_a_collective_fault_on_its_node_then_nccom_test_prints_the_failed_run_and_exits_1(root, capsys):
    shutil.copy(RECORDED / "nccom_test.failed.txt", root / "failed.txt")
    config = json.loads((root / standins.CONFIG).read_text())
    faults = {socket.gethostname(): "failed.txt"}
    (root / standins.CONFIG).write_text(json.dumps({**config, "collective_faults": faults}))
    assert standins.nccom_test(["allr", "-r", "32", "--check", "random"], root) == 1
    assert capsys.readouterr().out == (RECORDED / "nccom_test.failed.txt").read_text()


def operands() -> tuple[torch.Tensor, torch.Tensor]:
    """The compute check's operands, as ``core_main`` makes them."""
    return (
        torch.tensor(health_check.A, dtype=torch.float32),
        torch.tensor(health_check.B, dtype=torch.float32),
    )


def test_given_a_core_fault_then_the_torch_xla_stand_in_gets_that_cores_products_wrong_by_one_element(
    root, monkeypatch
):
    # Given the config naming core 5 of this host, and the compute check's own operands
    config = json.loads((root / standins.CONFIG).read_text())
    (root / standins.CONFIG).write_text(json.dumps({**config, "core_faults": {socket.gethostname(): 5}}))
    a, b = operands()
    right = (a @ b).tolist()
    assert right == [list(row) for row in health_check.EXPECTED_PRODUCT]
    assert torch_xla_standin.faulty_core(root / standins.CONFIG) == 5
    # When that core's process multiplies under the stand-in's mode
    with torch_xla_standin.OneElementOff():
        wrong = (a @ b).tolist()
    # Then one element is off by one, and the check finds it
    differ = [(i, j) for i in range(8) for j in range(8) if wrong[i][j] != right[i][j]]
    assert differ == [(0, 0)] and wrong[0][0] == right[0][0] + 1
    result = health_check.check_compute(
        health_check.expectation("trn1.32xlarge"), lambda core: wrong if core == 5 else right, parallel=1
    )
    assert not result.passed and "core 5: wrong product (1 of 64 elements differ)" in result.found


def test_given_no_core_fault_then_the_torch_xla_stand_in_device_is_the_cpu_computing_right(root, monkeypatch):
    monkeypatch.setattr(torch_xla_standin, "CONFIG", root / standins.CONFIG)
    monkeypatch.setenv("NEURON_RT_VISIBLE_CORES", "5")
    assert torch_xla_standin.device() == torch.device("cpu")
    a, b = operands()
    assert (a @ b).tolist() == [list(row) for row in health_check.EXPECTED_PRODUCT]


@pytest.mark.parametrize("argv", [["allg", "-r", "32", "--check"], ["allr", "-r", "32"], []])
def test_given_another_nccom_test_run_then_it_is_refused(root, capsys, argv):
    assert standins.nccom_test(argv, root) == 2
    assert "only 'allr -r N ... --check' is rehearsed" in capsys.readouterr().err


def test_given_the_configured_source_then_aws_streams_its_stand_in(root, capsysbinary):
    argv = ["s3", "cp", "--no-sign-request", "--only-show-errors", "s3://bucket/set.tar", "-"]
    assert standins.aws(argv, root) == 0
    assert capsysbinary.readouterr().out == b"shards" * 1000


@pytest.mark.parametrize(
    "argv",
    [
        ["s3", "cp", "s3://bucket/other.tar", "-"],
        ["s3", "sync", "s3://bucket/prefix/", "/data/x"],
        ["s3", "cp", "s3://bucket/set.tar"],
    ],
)
def test_given_anything_else_then_aws_refuses_with_exit_2(root, capsys, argv):
    assert standins.aws(argv, root) == 2
    assert "only 's3 cp <s3://bucket/set.tar> <- | FILE>'" in capsys.readouterr().err


def test_given_a_file_destination_then_aws_copies_the_stand_in_there(root, tmp_path):
    argv = ["s3", "cp", "--no-sign-request", "--only-show-errors", "s3://bucket/set.tar", str(tmp_path / "x")]
    assert standins.aws(argv, root) == 0
    assert (tmp_path / "x").read_bytes() == b"shards" * 1000


def test_given_the_driver_checks_query_then_dpkg_query_prints_the_recorded_version_without_newline(
    root, capsys
):
    assert standins.dpkg_query(["-W", "-f", "${Version}", "aws-neuronx-runtime-lib"], root) == 0
    assert capsys.readouterr().out == "2.31.24.0-0b044f4ce"


@pytest.mark.parametrize(
    "argv", [["-W", "-f", "${Version}", "aws-neuronx-tools"], ["-l", "aws-neuronx-runtime-lib"], []]
)
def test_given_another_query_then_dpkg_query_refuses_with_exit_2(root, capsys, argv):
    assert standins.dpkg_query(argv, root) == 2
    assert "only -W -f '${Version}' <aws-neuronx-runtime-lib> is rehearsed" in capsys.readouterr().err


def test_given_sleep_then_it_sleeps_the_configured_share(root, monkeypatch):
    slept = []
    monkeypatch.setattr(standins.time, "sleep", slept.append)
    assert standins.sleep(["30"], root) == 0 and slept == [pytest.approx(0.03)]
    assert standins.sleep(["-1"], root) == 2 and standins.sleep([], root) == 2


def test_given_a_trial_run_then_neuron_parallel_compile_sets_its_environment_and_marks_the_cache(
    root, tmp_path, monkeypatch, capfd
):
    cache = tmp_path / "cache"
    for name in [k for k in os.environ if k.startswith("NEURON_")]:  # what other tests' runs set
        monkeypatch.delenv(name)
    monkeypatch.setenv("NEURON_CC_FLAGS", f"--cache_dir={cache} --retry_failed_compilation")
    show = "import os; print(sorted(k for k in os.environ if k.startswith('NEURON_')))"
    assert standins.neuron_parallel_compile([sys.executable, "-c", show], root) == 0
    assert capfd.readouterr().out.strip() == str(sorted([*standins.TRIAL_RUN_ENV, "NEURON_CC_FLAGS"]))
    assert json.loads((cache / standins.COMPILED).read_text())["command"][0] == sys.executable


def test_given_a_failing_trial_run_then_neuron_parallel_compile_exits_with_it_and_marks_nothing(
    root, tmp_path, monkeypatch
):
    monkeypatch.setenv("NEURON_CC_FLAGS", f"--cache_dir={tmp_path / 'cache'}")
    assert standins.neuron_parallel_compile([sys.executable, "-c", "raise SystemExit(3)"], root) == 3
    assert not (tmp_path / "cache").exists()


def test_given_a_call_then_it_is_recorded_with_tool_argv_and_host(root):
    standins.record("sleep", ["30"], root)
    standins.record("aws", ["s3", "cp"], root)
    calls = [json.loads(x) for x in (root / standins.CALLS).read_text().splitlines()]
    assert [(c["tool"], c["argv"]) for c in calls] == [("sleep", ["30"]), ("aws", ["s3", "cp"])]
    assert all(c["host"] and c["time"] > 0 for c in calls)


def test_given_a_tool_then_its_wrapper_runs_this_file_isolated_from_the_pods_python_path():
    text = standins.wrapper("neuron-ls", "/venv/bin/python")
    assert text.splitlines() == [
        "#!/bin/sh",
        'exec /venv/bin/python -I /rehearsal/standins.py neuron-ls "$@"',
    ]
