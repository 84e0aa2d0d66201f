"""torchrun's fixed stop window (torch 2.9.0) against the pods' grace period and the stop budget."""

from __future__ import annotations

import re

from tests.contracts.emitted import manifests, pod_specs
from tests.contracts.torch_elastic import SHUTDOWN_WAIT_S
from tests.contracts.volcano import POD_HOST_FORMAT
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


def test_given_every_c10d_job_then_its_script_names_rank_0_s_volcano_host_name_as_the_store_host():
    # The pod whose bash $HOSTNAME is the endpoint's first label hosts the c10d store (is_host=1 in
    # PET_RDZV_CONF, trainium_job.launch.c10d_host_lines); that label must be the host name
    # Volcano's svc plugin gives the gang's first pod, or no pod would host.
    seen = 0
    for emitted in manifests():
        body = emitted.body
        if not body.get("apiVersion", "").startswith("batch.volcano.sh"):
            continue
        task = body["spec"]["tasks"][0]
        script = task["template"]["spec"]["containers"][0]["command"][-1]
        if "--rdzv_backend c10d" not in script:
            continue
        seen += 1
        # TorchX renders its app id as a macro, so its names stand in quotes the shell removes.
        endpoint = re.search(r"--rdzv_endpoint '?([^\s':]+):\d+", script)[1]  # type: ignore[index]
        rank0 = POD_HOST_FORMAT.format(job=body["metadata"]["name"], task=task["name"], index=0)
        assert endpoint == rank0, emitted.where
        label = rank0.split(".")[0]
        decides = re.search(
            r'if \[ "\$\{HOSTNAME%%\.\*\}" = \'?([^\s\']+)\'? \]; then rdzv_is_host=1; else rdzv_is_host=0',
            script,
        )
        assert decides is not None and decides[1] == label, emitted.where
        assert 'export PET_RDZV_CONF="is_host=${rdzv_is_host}"' in script
        assert "--rdzv_conf" not in script  # a flag would replace PET_RDZV_CONF whole
        assert script.index("PET_RDZV_CONF") < script.index("torchrun")
    assert seen >= 5
