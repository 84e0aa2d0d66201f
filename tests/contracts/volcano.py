"""Volcano (volcano-sh/volcano): the Job plugins and their arguments, the policy events and
actions its admission webhook accepts, the Queue's spec fields, the host names the ``svc`` plugin
gives pods, and the chart's values.

Version: v1.15.0 (chart 1.15.0; its source is installer/helm/chart/volcano of the same tag).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tests.contracts.model import Contract, Entry

VERSION = "v1.15.0"
_REPO = f"volcano-sh/volcano@{VERSION}"
_FACTORY = f"{_REPO}:pkg/controllers/job/plugins/factory.go"
_SVC = f"{_REPO}:pkg/controllers/job/plugins/svc/svc.go"
_BUS = f"{_REPO}:staging/src/volcano.sh/apis/pkg/apis/bus/v1alpha1"
_WEBHOOK = f"{_REPO}:pkg/webhooks/admission/jobs/validate/util.go"

#: ``spec.plugins`` of a Job: the registered plugin names.
PLUGINS = Contract(
    consumer="Volcano job controller (plugin registry)",
    version=VERSION,
    entries=tuple(
        Entry(name, use, f"{_FACTORY}:{line}")
        for name, use, line in (
            ("ssh", "SSH keys shared by the job's pods", 34),
            ("env", "VC_TASK_INDEX / VK_TASK_INDEX in every container (takes no arguments)", 35),
            ("svc", "stable host names, a headless Service, VC_<TASK>_HOSTS/NUM, a NetworkPolicy", 36),
            ("tensorflow", "TF_CONFIG for TensorFlow workers", 37),
            ("mpi", "an MPI host file for mpirun", 38),
            ("pytorch", "MASTER_ADDR/PORT, WORLD_SIZE, RANK", 39),
            ("hcclrank", "HCCL rank table", 40),
            ("ray", "Ray head/worker wiring", 41),
        )
    ),
)

#: Arguments of the ``svc`` plugin: a Go flag set (``--name`` or ``--name=true|false``); a parse
#: error is only logged, so an unknown flag is silently dropped.
SVC_ARGUMENTS = Contract(
    consumer="Volcano svc plugin (flag set)",
    version=VERSION,
    entries=(
        Entry(
            "--publish-not-ready-addresses",
            "the headless Service publishes pods before they are ready (rendezvous before readiness)",
            f"{_SVC}:64-65",
            kind="flag",
        ),
        Entry(
            "--disable-network-policy",
            "no NetworkPolicy; without it the plugin creates one admitting ingress only from the job's "
            "own pods (inert unless the CNI enforces network policies)",
            f"{_SVC}:66-67,142-143,250-280",
            kind="flag",
        ),
    ),
)
#: Plugins that take no arguments (their New ignores them).
NO_ARGUMENTS = {"env": f"{_REPO}:pkg/controllers/job/plugins/env/env.go:35-36"}

#: ``spec.policies[].event``: what the admission webhook lets a Job use.
POLICY_EVENTS = Contract(
    consumer="Volcano admission webhook (jobs/validate)",
    version=VERSION,
    entries=(
        *(
            Entry(name, "a policy event a Job may use", f"{_WEBHOOK}:31-39; {_BUS}/events.go")
            for name in (
                "*",
                "PodFailed",
                "PodEvicted",
                "PodPending",
                "Unknown",
                "TaskCompleted",
                "TaskFailed",
                "JobUpdated",
            )
        ),
        *(
            Entry(name, "internal event: the webhook refuses it in a Job", f"{_WEBHOOK}:40-42", read=False)
            for name in ("OutOfSync", "CommandIssued", "PodRunning")
        ),
    ),
)

#: ``spec.policies[].action``.
POLICY_ACTIONS = Contract(
    consumer="Volcano admission webhook (jobs/validate)",
    version=VERSION,
    entries=(
        *(
            Entry(name, "a policy action a Job may use", f"{_WEBHOOK}:46-54; {_BUS}/actions.go")
            for name in (
                "AbortJob",
                "RestartJob",
                "RestartTask",
                "RestartPod",
                "RestartPartition",
                "TerminateJob",
                "CompleteJob",
                "ResumeJob",
            )
        ),
        *(
            Entry(name, "internal action: the webhook refuses it in a Job", f"{_WEBHOOK}:55-59", read=False)
            for name in ("SyncJob", "EnqueueJob", "SyncQueue", "OpenQueue", "CloseQueue")
        ),
    ),
)

#: ``spec`` of a ``scheduling.volcano.sh/v1beta1`` Queue.
QUEUE_SPEC = Contract(
    consumer="Volcano scheduler (Queue)",
    version=VERSION,
    entries=tuple(
        Entry(
            name,
            use,
            f"{_REPO}:staging/src/volcano.sh/apis/pkg/apis/scheduling/v1beta1/types.go:459 (QueueSpec)",
            kind=kind,
        )
        for name, use, kind in (
            ("weight", "share of the cluster when queues compete", "value"),
            ("capability", "upper bound of the resources the queue's jobs may hold", "map"),
            ("reclaimable", "whether other queues may reclaim its resources", "value"),
            ("extendClusters", "multi-cluster placement", "list"),
            ("guarantee", "resources reserved for the queue", "map"),
            ("affinity", "node-group affinity", "map"),
            ("type", "the kind of queue (scheduler-specific)", "value"),
            ("parent", "parent queue (hierarchical queues)", "value"),
            ("deserved", "resources the queue deserves (capacity plugin)", "map"),
            ("priority", "queue priority", "value"),
            ("dequeueStrategy", "how jobs leave the queue", "value"),
        )
    ),
)

#: How the ``svc`` plugin names a Job's pods: pod name ``<job>-<task>-<index>``
#: (helpers.go:35,104), ``spec.hostname`` = the pod name and ``spec.subdomain`` = the job name
#: when the template leaves them empty (svc.go:86-90), behind a headless Service named after the
#: job: so ``<job>-<task>-<index>.<job>`` resolves in the job's namespace.
POD_HOST_FORMAT = "{job}-{task}-{index}.{job}"
POD_HOST_SOURCE = f"{_REPO}:pkg/controllers/job/helpers/helpers.go:35,104; {_SVC}:86-90"

#: Variables the plugins put into every container: ours must not set them.
PLUGIN_ENV = Contract(
    consumer="Volcano env and svc plugins",
    version=VERSION,
    entries=(
        Entry(
            "VC_TASK_INDEX",
            "the pod's index in its task",
            f"{_REPO}:pkg/controllers/job/plugins/env/const.go:27",
            sets_itself=True,
        ),
        Entry(
            "VK_TASK_INDEX",
            "the same, former name",
            f"{_REPO}:pkg/controllers/job/plugins/env/const.go:24",
            sets_itself=True,
        ),
    ),
)
#: ``VC_<TASK>_HOSTS`` / ``VC_<TASK>_NUM`` (task name upper-cased, '-' as '_'): set by svc.
PLUGIN_ENV_FORMATS = (("VC_", "_HOSTS"), ("VC_", "_NUM"))
PLUGIN_ENV_FORMATS_SOURCE = f"{_REPO}:pkg/controllers/job/plugins/svc/const.go:23,25"


@dataclass(frozen=True)
class Policy:
    """One Job lifecycle policy (``spec.policies[]``): an event or an exit code, and the action."""

    action: str
    event: str | None = None
    exit_code: int | None = None


def policies(raw: Iterable[Mapping[str, Any]]) -> tuple[Policy, ...]:
    """The policies of a Job's ``spec.policies``, in order."""
    return tuple(Policy(p["action"], p.get("event"), p.get("exitCode")) for p in raw)


def action_for_failure(job_policies: Iterable[Policy], exit_code: int) -> str | None:
    """What the job controller does when a pod fails with ``exit_code``: the first policy whose
    event is ``PodFailed`` or whose exit code is that one, in the Job's order; None without one
    (volcano-sh/volcano v1.15.1 pkg/controllers/job/job_controller_util.go ``applyPolicies``
    L257-281, read at v1.15.1, the newest tag of the v1.15 line in the snapshot)."""
    for policy in job_policies:
        if policy.event == "PodFailed" or policy.exit_code == exit_code:
            return policy.action
    return None
