"""The worker script as rendered, run by bash with stand-ins for the driver check, the fabric check and
torchrun: each way it ends appends the restart ledger's line with the cause its exit code tells, and
the script's exit code stays its own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.trainium_job.test_worker import paths
from trainium_job.fabric_check_steps import EXIT_CODE as FABRIC_EXIT_CODE
from trainium_job.fabric_check_steps import NOT_MEASURED_EXIT_CODE, FabricCheck
from trainium_job.launch import LaunchSpec
from trainium_job.paths import RESTART_LEDGER, JobPaths
from trainium_job.restarts import Entry, read
from trainium_job.worker import LEDGER_MODULE, LEDGER_TIMEOUT_S, worker_script

REPO = Path(__file__).resolve().parents[2]
SPEC = LaunchSpec(nnodes=2, nproc_per_node=1, rdzv_endpoint="localhost:29400")
# python: the checks answer from the environment; the ledger's own module runs for real.
PYTHON = """#!/bin/sh
if [ "$1" = -m ]; then
  case "$2" in
    training.node.driver_check) exit "${{DRIVER_RC:-0}}" ;;
    training.node.fabric_check) exit "${{FABRIC_RC:-0}}" ;;
  esac
fi
exec {python} "$@"
"""
TORCHRUN = """#!/bin/sh
case "$*" in *fabric_check*) exit 0 ;; esac
echo training >> {root}/events
if [ -n "${{HUNG_RANK:-}}" ]; then
  mkdir -p {root}/run/hang
  echo '{{"time": 1767225600, "host": "node-b", "rank": 1, "step": 41, "waiting_for": "an all-reduce"}}' \
    > {root}/run/hang/node-b.rank00001.json
fi
trap 'kill $! 2>/dev/null; exit 1' TERM
if [ -n "${{TRAIN:-}}" ]; then sleep 300 & wait $!; fi
exit "${{TRAIN_RC:-0}}"
"""


@pytest.fixture()
def pod(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (
        ("python", PYTHON),
        ("torchrun", TORCHRUN),
        ("neuron_parallel_compile", "#!/bin/sh\n"),
    ):
        (bin_dir / name).write_text(text.format(root=tmp_path, python=sys.executable))
        (bin_dir / name).chmod(0o755)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / ".staged").write_text("4 shards\n")
    (tmp_path / "cache").mkdir()
    Path(paths(tmp_path).cache_marker).touch()
    return tmp_path


def start(root: Path, **env: str) -> subprocess.Popen[str]:
    script = worker_script(SPEC, paths(root), fabric_check=FabricCheck())
    variables = {
        "PATH": f"{root / 'bin'}:{os.environ['PATH']}",
        "HOME": str(root),
        "HOSTNAME": "job-worker-1",
        "NODE_NAME": "node-a",
        **env,
    }
    return subprocess.Popen(
        ["bash", "-c", script],
        cwd=REPO,
        env=variables,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def run(root: Path, **env: str) -> tuple[int, str]:
    proc = start(root, **env)
    out, _ = proc.communicate(timeout=60)
    return proc.returncode, out


def ledger(root: Path) -> list[Entry]:
    return read(root / "run" / RESTART_LEDGER)


@pytest.mark.parametrize(
    "env, code, cause",
    [
        # A run that began on other nodes, resumed on one whose driver the image refuses.
        ({"DRIVER_RC": "78", "RUN_BEGAN": "1"}, 78, "driver"),
        ({"FABRIC_RC": str(FABRIC_EXIT_CODE)}, FABRIC_EXIT_CODE, "fabric"),
        ({"FABRIC_RC": str(NOT_MEASURED_EXIT_CODE)}, NOT_MEASURED_EXIT_CODE, "fabric"),
        ({"TRAIN_RC": "1"}, 1, "failure"),
    ],
    ids=["driver", "fabric", "fabric-not-measured", "torchrun"],
)
def test_given_a_step_that_fails_then_the_pod_exits_with_its_code_and_the_ledger_has_its_cause(
    pod, env, code, cause
):
    if env.pop("RUN_BEGAN", None):
        (pod / "run").mkdir()
    rc, out = run(pod, **env)
    assert rc == code, out
    (line,) = ledger(pod)
    assert (line.event, line.cause, line.exit_code, line.host, line.by) == (
        "end",
        cause,
        code,
        "node-a",
        "script",
    )
    assert "restart ledger" not in out  # silent: the pod's last line says why it ended
    assert "Warning" not in out  # the package does not load the module before python -m runs it


def test_given_the_script_then_it_runs_the_ledger_module():
    import trainium_job.restarts

    assert LEDGER_MODULE == trainium_job.restarts.__name__
    job = JobPaths(data_dir="/d", dataset_marker="/d/.staged", cache_dir="/c", output_dir="/r")
    assert f"timeout {LEDGER_TIMEOUT_S} python -m {LEDGER_MODULE} end --run-dir /r " in worker_script(
        SPEC, job
    )


def test_given_a_first_attempt_stopped_by_the_driver_check_then_fsx_is_left_as_it_was(pod):
    rc, out = run(pod, DRIVER_RC="78")
    assert rc == 78, out
    assert not (pod / "run").exists()


def test_given_a_run_that_succeeds_then_the_ledger_gets_nothing(pod):
    rc, out = run(pod)
    assert rc == 0, out
    assert not (pod / "run" / RESTART_LEDGER).exists()


def test_given_hung_workers_on_another_node_then_their_marker_becomes_a_hang_line(pod):
    rc, out = run(pod, TRAIN_RC="1", HUNG_RANK="1")
    assert rc == 1, out
    got = [(e.host, e.cause, e.exit_code, e.step, e.detail) for e in ledger(pod)]
    assert got == [("node-b", "hang", 86, 41, "an all-reduce"), ("node-a", "failure", 1, None, None)]
    assert not any((pod / "run" / "hang").iterdir())


def test_given_sigterm_while_training_then_the_pod_exits_143_recorded_as_preemption(pod):
    proc = start(pod, TRAIN="1")
    deadline = time.monotonic() + 30
    while not (pod / "events").exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 143, out
    (line,) = ledger(pod)
    assert (line.cause, line.exit_code) == ("preemption", 143)


def test_given_a_stopped_pod_then_its_ledger_line_fits_in_the_grace_left_after_torchrun():
    from trainium_job.stop_budget import AGENT_EXIT_MARGIN_S

    assert LEDGER_TIMEOUT_S < AGENT_EXIT_MARGIN_S
