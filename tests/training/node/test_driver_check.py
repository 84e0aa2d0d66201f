"""The in-pod driver check on the version strings the pods read (tests/training/recorded/
neuron_versions, each with where it comes from): the real command, a stand-in dpkg-query."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from training.node.driver_check import MISMATCH_EXIT_CODE, verdict
from trainium_job.neuron_stack import NEURON_STACK

REPO = Path(__file__).resolve().parents[3]
RECORDED = Path(__file__).resolve().parent / "recorded" / "neuron_versions"


def run_check(
    tmp_path: Path, *, driver_file: Path, dpkg_output: Path | None
) -> subprocess.CompletedProcess[str]:
    """``python -m training.node.driver_check`` with a dpkg-query on PATH that prints ``dpkg_output``
    for exactly the query the check must make (and fails like dpkg for anything else)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if dpkg_output is not None:
        fake = bin_dir / "dpkg-query"
        fake.write_text(
            "#!/bin/sh\n"
            "[ \"$*\" = '-W -f ${Version} aws-neuronx-runtime-lib' ] || "
            '{ echo "dpkg-query: no packages found matching $*" >&2; exit 1; }\n'
            f"cat '{dpkg_output}'\n"
        )
        fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}/usr/bin:/bin"}
    if dpkg_output is None:
        env["PATH"] = str(bin_dir)  # no dpkg-query anywhere
    return subprocess.run(
        [sys.executable, "-m", "training.node.driver_check", "--driver_version_file", str(driver_file)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_given_the_pinned_ami_driver_and_the_dlc_runtime_then_the_pod_goes_on(tmp_path):
    done = run_check(
        tmp_path,
        driver_file=RECORDED / "sys_module_neuron_version.ami-v20260625",
        dpkg_output=RECORDED / "dpkg_query_runtime_lib.dlc-2.29.1",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "Neuron driver 2.28.0.0 and runtime 2.31.24.0-0b044f4ce: a supported pair"
    ]


@pytest.mark.parametrize("ami", ["v20260714", "v20260403"])
def test_given_a_driver_outside_the_runtimes_range_then_one_line_naming_both_and_the_fix(tmp_path, ami):
    driver_file = RECORDED / f"sys_module_neuron_version.ami-{ami}"
    done = run_check(
        tmp_path, driver_file=driver_file, dpkg_output=RECORDED / "dpkg_query_runtime_lib.dlc-2.29.1"
    )
    assert done.returncode == MISMATCH_EXIT_CODE
    (line,) = done.stderr.splitlines()
    driver = driver_file.read_text().strip()
    assert line.startswith(
        f"error: the node's Neuron driver {driver} does not run the image's Neuron runtime 2.31.24.0"
    )
    assert "trainium_ami_release_version" in line and NEURON_STACK.driver_range in line
    assert done.stdout == ""


def test_given_another_images_runtime_then_a_warning_and_no_stop(tmp_path):
    done = run_check(
        tmp_path,
        driver_file=RECORDED / "sys_module_neuron_version.ami-v20260714",
        dpkg_output=RECORDED / "dpkg_query_runtime_lib.dlc-2.30.0",
    )
    assert done.returncode == 0
    (line,) = done.stdout.splitlines()
    assert line.startswith("warning: the image's Neuron runtime 2.32.31.0-0234f5ed2 is not")


def test_given_no_driver_file_then_a_warning_and_no_stop(tmp_path):
    done = run_check(
        tmp_path, driver_file=tmp_path / "absent", dpkg_output=RECORDED / "dpkg_query_runtime_lib.dlc-2.29.1"
    )
    assert done.returncode == 0
    assert done.stdout.startswith("warning: Neuron driver version unreadable")


def test_given_no_dpkg_then_a_warning_and_no_stop(tmp_path):
    done = run_check(
        tmp_path, driver_file=RECORDED / "sys_module_neuron_version.ami-v20260714", dpkg_output=None
    )
    assert done.returncode == 0
    assert done.stdout.startswith("warning: aws-neuronx-runtime-lib version unreadable")


def test_given_the_recorded_runtime_then_it_is_the_tables():
    assert NEURON_STACK.is_runtime((RECORDED / "dpkg_query_runtime_lib.dlc-2.29.1").read_text())


@pytest.mark.parametrize(
    ("driver", "ok"),
    [("2.27.4.0", True), ("2.28.0.0", True), ("2.27.3.0", False), ("2.29.0.0", False), ("2.31.7.0", False)],
)
def test_given_driver_versions_then_the_range_decides(driver, ok):
    assert verdict(driver, "2.31.24.0-0b044f4ce")[0] is ok
