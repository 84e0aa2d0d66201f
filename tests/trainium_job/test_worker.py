"""The worker script run as a container runs it: PID 1 of its own PID namespace, which gets
no signal it has no handler for. ``neuron_parallel_compile`` and ``torchrun`` are stand-ins that
say what they got; everything else is the script as rendered."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.rehearsal.cluster import PID1, Pod, launch, namespaces_available
from trainium_job.launch import LaunchSpec
from trainium_job.paths import JobPaths
from trainium_job.worker import worker_script

pytestmark = pytest.mark.skipif(namespaces_available() is not None, reason=f"{namespaces_available()}")

SPEC = LaunchSpec(nnodes=1, nproc_per_node=1, rdzv_endpoint="localhost:29400")
#: Until the trap is reached, as the pod's own seconds go: the stop must not wait for SIGKILL.
PROMPT_S = 10
# Each stand-in appends what happened to it to the pod folder's events file.
COMPILER = """#!/bin/sh
echo "compile pid=$$" >> {events}
trap 'echo "compile got SIGTERM" >> {events}; exit 1' TERM
if [ -n "${{FAIL:-}}" ]; then exit "$FAIL"; fi
if [ -n "${{BLOCK:-}}" ]; then sleep 300 & wait $!; fi
"""
TORCHRUN = """#!/bin/sh
echo "torchrun pid=$$ $*" >> {events}
trap 'sleep 0.5; echo "torchrun stopped" >> {events}; exit 1' TERM
if [ -n "${{TRAIN:-}}" ]; then sleep 300 & wait $!; fi
"""


@pytest.fixture()
def pod_dir(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("neuron_parallel_compile", COMPILER), ("torchrun", TORCHRUN)):
        (bin_dir / name).write_text(text.format(events=tmp_path / "events"))
        (bin_dir / name).chmod(0o755)
    return tmp_path


def paths(root: Path) -> JobPaths:
    return JobPaths(
        data_dir=str(root / "data"),
        dataset_marker=str(root / "data" / ".staged"),
        cache_dir=str(root / "cache"),
        output_dir=str(root / "run"),
    )


def start(root: Path, **env: str) -> Pod:
    path = f"{root / 'bin'}:{os.environ['PATH']}"
    variables = [f"{k}={v}" for k, v in {"PATH": path, **env}.items()]
    command = [*PID1, "env", *variables, "bash", "-c", worker_script(SPEC, paths(root))]
    return launch(command, root / "log.txt", name="worker", hostname="worker")


def events(root: Path) -> list[str]:
    path = root / "events"
    return path.read_text().splitlines() if path.exists() else []


def until(condition, pod: Pod) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert pod.running and time.monotonic() < deadline, pod.output()
        time.sleep(0.05)


def stop(pod: Pod) -> tuple[int | None, float]:
    """SIGTERM to PID 1: (exit code or None if it still runs after PROMPT_S, seconds)."""
    t0 = time.monotonic()
    pod.terminate()
    code = pod.wait(PROMPT_S)
    pod.kill()
    return code, time.monotonic() - t0


def test_given_a_pod_waiting_for_the_dataset_when_sigterm_then_it_exits_143_at_once(pod_dir):
    pod = start(pod_dir)
    until(lambda: "waiting for the dataset" in pod.output(), pod)
    code, seconds = stop(pod)
    assert code == 143 and seconds < PROMPT_S, pod.output()
    assert events(pod_dir) == []  # neither precompile nor training started


def test_given_a_pod_precompiling_when_sigterm_then_the_trial_run_gets_it_and_the_pod_exits_143_unmarked(
    pod_dir,
):
    (pod_dir / "data").mkdir()
    (pod_dir / "data" / ".staged").write_text("4 shards\n")
    pod = start(pod_dir, BLOCK="1")
    until(lambda: bool(events(pod_dir)), pod)
    code, _ = stop(pod)
    assert code == 143, pod.output()
    assert events(pod_dir)[1:] == ["compile got SIGTERM"]  # passed on, and waited for
    assert not Path(paths(pod_dir).cache_marker).exists()  # the next attempt compiles again


def test_given_a_failing_precompile_then_the_pod_exits_with_its_code_and_marks_nothing(pod_dir):
    (pod_dir / "data").mkdir()
    (pod_dir / "data" / ".staged").write_text("4 shards\n")
    pod = start(pod_dir, FAIL="7")
    assert pod.wait(30) == 7, pod.output()
    pod.kill()
    assert not Path(paths(pod_dir).cache_marker).exists()
    assert [e.split()[0] for e in events(pod_dir)] == ["compile"]  # and no training


def test_given_a_precompile_that_succeeds_then_the_cache_is_marked_and_the_pod_ends_as_torchrun_does(pod_dir):
    (pod_dir / "data").mkdir()
    (pod_dir / "data" / ".staged").write_text("4 shards\n")
    pod = start(pod_dir)
    assert pod.wait(30) == 0, pod.output()
    pod.kill()
    assert Path(paths(pod_dir).cache_marker).exists()
    compile_line, torchrun_line = events(pod_dir)
    assert compile_line.startswith("compile pid=") and compile_line != "compile pid=1"
    assert torchrun_line.startswith("torchrun pid=") and " --nnodes 1 " in torchrun_line


def test_given_a_pod_training_when_sigterm_then_torchrun_gets_it_and_the_pod_exits_143_after_it(pod_dir):
    (pod_dir / "data").mkdir()
    (pod_dir / "data" / ".staged").write_text("4 shards\n")
    (pod_dir / "cache").mkdir()
    Path(paths(pod_dir).cache_marker).touch()
    pod = start(pod_dir, TRAIN="1")
    until(lambda: bool(events(pod_dir)), pod)
    code, _ = stop(pod)
    # torchrun ends with 1 after its graceful stop; the pod reports the SIGTERM that stopped it.
    assert code == 143, pod.output()
    assert events(pod_dir)[1:] == ["torchrun stopped"]  # waited for, not cut short
