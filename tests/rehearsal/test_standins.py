"""The rehearsal's stand-ins on their own: what each prints, runs, records and refuses."""

from __future__ import annotations

import json
import sys

import pytest

from tests.rehearsal import standins
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
    }
    (tmp_path / standins.CONFIG).write_text(json.dumps(config))
    return tmp_path


def test_given_a_trn1_32xlarge_then_neuron_ls_prints_its_16_devices_and_32_cores(root, capsys):
    assert standins.neuron_ls([], root) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "instance-type: trn1.32xlarge" and lines[1].startswith("instance-id: i-")
    header = [c.strip() for c in lines[3].strip("|").split("|")]
    assert header[:4] == ["NEURON DEVICE", "NEURON CORES", "NEURON CORE IDS", "NEURON MEMORY"]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines[5:-1]]
    facts = instance_facts("trn1.32xlarge")
    assert len(rows) == facts.neuron_devices and sum(int(r[1]) for r in rows) == facts.neuron_cores
    # The Neuron documentation's row of device 0 (runtime-performance-tips.rst, trn1.32xlarge).
    assert rows[0] == ["0", "2", "0-1", "32 GB", "12, 3, 4, 1", "0000:10:1c.0", "0-31,64-95", "0"]
    assert rows[15][2] == "30-31"


def test_given_an_instance_type_without_a_recording_then_neuron_ls_says_so_and_exits_1(root, capsys):
    config = json.loads((root / standins.CONFIG).read_text())
    (root / standins.CONFIG).write_text(json.dumps({**config, "instance_type": "trn1n.32xlarge"}))
    assert standins.neuron_ls([], root) == 1
    assert "no recorded layout for trn1n.32xlarge" in capsys.readouterr().err


def test_given_the_configured_source_then_aws_streams_its_stand_in(root, capsysbinary):
    argv = ["s3", "cp", "--no-sign-request", "--only-show-errors", "s3://bucket/set.tar", "-"]
    assert standins.aws(argv, root) == 0
    assert capsysbinary.readouterr().out == b"shards" * 1000


@pytest.mark.parametrize(
    "argv",
    [
        ["s3", "cp", "s3://bucket/other.tar", "-"],
        ["s3", "sync", "s3://bucket/prefix/", "/data/x"],
        ["s3", "cp", "s3://bucket/set.tar", "/data/set.tar"],
    ],
)
def test_given_anything_else_then_aws_refuses_with_exit_2(root, capsys, argv):
    assert standins.aws(argv, root) == 2
    assert "only 's3 cp <s3://bucket/set.tar> -'" in capsys.readouterr().err


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
