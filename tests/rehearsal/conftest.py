"""The rehearsal, played once per session on the small variant of the training template."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.rehearsal.cluster import Network, die_with_test, namespaces_available, pod_network_available
from tests.rehearsal.manifests import Workload, workload
from tests.rehearsal.scenario import Observations, play, source_tar, variant_context
from tests.rehearsal.substitutions import POD_NETWORK
from tests.support import synth_training


@pytest.fixture(scope="session")
def rehearsal_tar(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """(the stand-in of the public tar, its shards' vocab size)."""
    return source_tar(tmp_path_factory.mktemp("source"), {**os.environ, "OMP_NUM_THREADS": "1"})


@pytest.fixture(scope="session")
def variant(rehearsal_tar: tuple) -> Workload:
    """The pods of the small variant, from its synthesized training template."""
    return workload(synth_training(**variant_context(rehearsal_tar[1])))


@pytest.fixture(scope="session")
def rehearsal(
    tmp_path_factory: pytest.TempPathFactory, variant: Workload, rehearsal_tar: tuple
) -> Observations:
    """The whole story (``tests.rehearsal.scenario``); every pod it started is killed when it
    returns or fails, each with its PID namespace (nothing outlives the fixture)."""
    why = namespaces_available() or pod_network_available()
    if why is not None:
        pytest.skip(f"the rehearsal's pods {why}")
    return play(tmp_path_factory.mktemp("rehearsal"), variant, rehearsal_tar[0])


@pytest.fixture()
def network():
    why = namespaces_available() or pod_network_available()
    if why is not None:
        pytest.skip(f"the rehearsal's pods {why}")
    network = Network()
    yield network
    network.close()


@pytest.fixture()
def pod(network):
    """A process in a network namespace of its own, its eth0 on the bridge (a pod's network)."""
    proc = subprocess.Popen(
        [*network.user(), "unshare", "--net", "--", "sleep", "300"], preexec_fn=die_with_test
    )
    deadline = time.monotonic() + 30
    while Path(f"/proc/{proc.pid}/comm").read_text().strip() != "sleep":  # unshare has exec'd
        assert proc.poll() is None and time.monotonic() < deadline, "the pod's namespace did not come up"
        time.sleep(0.01)
    network.plug(proc.pid, "testpod", f"{POD_NETWORK}.250")
    yield [*network.user(), "nsenter", f"--target={proc.pid}", "--net", "--"]
    proc.kill()
    proc.wait()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "after(phase): the rehearsal phase (scenario.PHASES) whose observations the test reads"
    )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    """A rehearsal test whose phase did not play fails, in its own call (a failure, not a setup
    error), naming the phase that failed and carrying its pods' log tails, instead of asserting on
    what that phase never saw."""
    funcargs = getattr(item, "funcargs", {})
    scenes = ("rehearsal", "two_phases", "budget_scene", "own_job")
    for observations in (funcargs.get(name) for name in scenes):
        if isinstance(observations, Observations):
            marker = item.get_closest_marker("after")
            observations.require(marker.args[0] if marker is not None else observations.phases[-1])
