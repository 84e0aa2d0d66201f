"""The rehearsal, played once per session on the small variant of the training template."""

from __future__ import annotations

import os

import pytest

from tests.rehearsal.cluster import namespaces_available, pod_network_available
from tests.rehearsal.manifests import Workload, workload
from tests.rehearsal.scenario import Observations, play, source_tar, variant_context
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
