"""torchrun's fixed stop window (torch 2.9.0) against the pods' grace period and the stop budget."""

from __future__ import annotations

from tests.contracts.emitted import description, manifests, pod_specs
from tests.contracts.torch_elastic import SHUTDOWN_WAIT_S
from tests.contracts.volcano import POD_HOST_FORMAT
from trainium_job.launch import RDZV_CONF_ENV
from trainium_job.pod_program.program import rendezvous_env
from trainium_job.stop_budget import AGENT_EXIT_MARGIN_S, TORCHRUN_SHUTDOWN_S


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


def test_given_every_c10d_job_then_its_program_makes_rank_0_s_volcano_host_the_store_host():
    # The pod whose host name's first label is the store's host in the description runs torchrun
    # with is_host=1 in PET_RDZV_CONF (trainium_job.pod_program.program.rendezvous_env; torch's own
    # guess fails on a fresh pod: trainium_job.launch.c10d_host_lines); that label must be the host
    # name Volcano's svc plugin gives the gang's first pod, or no pod would host.
    seen = 0
    for emitted in manifests():
        body = emitted.body
        if not body.get("apiVersion", "").startswith("batch.volcano.sh"):
            continue
        task = body["spec"]["tasks"][0]
        described = description(task["template"]["spec"]["containers"][0])
        assert described is not None, emitted.where
        train = list(described.phases[0].train)
        if train[train.index("--rdzv_backend") + 1] != "c10d":
            continue
        seen += 1
        endpoint = train[train.index("--rdzv_endpoint") + 1]
        rank0 = POD_HOST_FORMAT.format(job=body["metadata"]["name"], task=task["name"], index=0)
        assert endpoint.rsplit(":", 1)[0] == rank0, emitted.where
        rank1 = POD_HOST_FORMAT.format(job=body["metadata"]["name"], task=task["name"], index=1)
        assert described.rendezvous is not None, emitted.where
        on_rank0, on_rank1 = (
            rendezvous_env(described.rendezvous, host)[RDZV_CONF_ENV] for host in (rank0, rank1)
        )
        assert on_rank0.startswith("is_host=1") and on_rank1.startswith("is_host=0"), emitted.where
        # A flag would replace PET_RDZV_CONF whole.
        assert all("--rdzv_conf" not in phase.train for phase in described.phases)
    assert seen >= 5
