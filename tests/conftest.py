"""Session-wide fixtures: the default app is synthesized once, by the real CDK CLI."""

from __future__ import annotations

import pytest

from tests.support import NODEGROUP, PLATFORM_STACK, TRAINING_STACK, Synth, run_cdk_synth


@pytest.fixture(scope="session")
def default_synth(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    """``cdk synth`` of the default configuration (no context, no credentials): both stacks,
    synthesized once for the session."""
    synth = run_cdk_synth(tmp_path_factory.mktemp("cdk.out"))
    assert synth.returncode == 0, synth.stderr[-4000:]
    return synth


@pytest.fixture(scope="session")
def platform_json(default_synth: Synth) -> dict:
    """The platform stack's template as JSON."""
    return default_synth.templates[PLATFORM_STACK]


@pytest.fixture(scope="session")
def platform_template(default_synth: Synth):
    """The platform stack's template for ``aws_cdk.assertions``."""
    return default_synth.template(PLATFORM_STACK)


@pytest.fixture(scope="session")
def training_json(default_synth: Synth) -> dict:
    """The training stack's template as JSON."""
    return default_synth.templates[TRAINING_STACK]


@pytest.fixture(scope="session")
def training_template(default_synth: Synth):
    """The training stack's template for ``aws_cdk.assertions``."""
    return default_synth.template(TRAINING_STACK)


@pytest.fixture(scope="session")
def nodegroup_synth(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    """``cdk synth -c trainium_capacity=nodegroup``: the fixed Trainium nodegroup instead of the
    default's Karpenter, by the same CLI and cdk.json (its feature flags shape the template),
    synthesized once for the session."""
    synth = run_cdk_synth(tmp_path_factory.mktemp("cdk.out-nodegroup"), NODEGROUP)
    assert synth.returncode == 0, synth.stderr[-4000:]
    return synth


@pytest.fixture(scope="session")
def nodegroup_platform_json(nodegroup_synth: Synth) -> dict:
    """The platform stack's template with the fixed nodegroup, as JSON."""
    return nodegroup_synth.templates[PLATFORM_STACK]


@pytest.fixture(scope="session")
def nodegroup_platform_template(nodegroup_synth: Synth):
    """The platform stack's template with the fixed nodegroup, for ``aws_cdk.assertions``."""
    return nodegroup_synth.template(PLATFORM_STACK)
