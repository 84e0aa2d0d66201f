"""torchrun's fixed stop window (torch 2.9.0) against the pods' grace period and the stop budget."""

from __future__ import annotations

from trainium_job.stop_budget import AGENT_EXIT_MARGIN_S, TORCHRUN_SHUTDOWN_S

from .emitted import manifests, pod_specs
from .torch_elastic import SHUTDOWN_WAIT_S


def test_given_the_pinned_torch_then_the_stop_budget_uses_its_window():
    assert TORCHRUN_SHUTDOWN_S == SHUTDOWN_WAIT_S


def test_given_every_training_pod_then_its_grace_period_outlasts_torchrun():
    periods = {
        emitted.where: pod.get("terminationGracePeriodSeconds", 30)
        for emitted in manifests()
        for pod in pod_specs(emitted.body)
        if "torchrun" in str(pod.get("containers"))
    }
    assert len(periods) >= 7
    short = {where: s for where, s in periods.items() if s < SHUTDOWN_WAIT_S + AGENT_EXIT_MARGIN_S}
    assert short == {}
