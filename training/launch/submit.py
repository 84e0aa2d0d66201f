"""The training job's submitter: wait for the job's data, then create its Volcano Job, owned by
the submitter's own Job (why: :mod:`trainium_job.submission`).

    python -m training.launch.submit '<submission JSON>'

1. Each wait of the submission, bounded (:mod:`trainium_job.waits`): at its deadline, or when
   the staging Job gave up, one line and ``DEADLINE_EXIT_CODE`` (the Job's pod failure policy
   ends it there: no Volcano Job, no Trainium node).
2. The spend against the ceiling: a job already at it is not submitted (``BUDGET_EXIT_CODE``).
3. The Volcano Job from the mounted manifest, with an owner reference to the submitter's Job
   (its name and UID from the pod's labels, through the downward API). Created: one line, 0.
   Already there (409, a retry of this submitter): one line, 0. Any other API error: one line
   and 1, and the Job retries the pod.

Through the official ``kubernetes`` client with the pod's ServiceAccount, which may only
``create`` Volcano Jobs in its namespace (RBAC cannot narrow ``create`` to a name: Kubernetes
docs, "Using RBAC Authorization", Referring to resources).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from typing import Any, Final

# The kubernetes client ships no type information (no py.typed, no stubs package).
from kubernetes import client, config  # type: ignore[import-untyped]
from kubernetes.client.exceptions import ApiException  # type: ignore[import-untyped]

from trainium_job.exit_codes import BUDGET_EXIT_CODE, DEADLINE_EXIT_CODE, SIGTERM_EXIT_CODE
from trainium_job.pod_program.spend import spend, stop_requested
from trainium_job.submission import JOB_NAME_ENV, JOB_UID_ENV, Submission
from trainium_job.waits import wait_for

#: Volcano's Job API (``batch.volcano.sh/v1alpha1``, plural ``jobs``).
GROUP, VERSION, PLURAL = "batch.volcano.sh", "v1alpha1", "jobs"
#: Seconds the create request may take (the client waits forever without one).
REQUEST_TIMEOUT_S: Final = 30


def owned(manifest: dict[str, Any], *, owner_name: str, owner_uid: str) -> dict[str, Any]:
    """``manifest`` with an owner reference to the submitter's batch Job: deleting that Job
    deletes the Volcano Job (same namespace; no ``blockOwnerDeletion``, which needs more rights)."""
    reference = {"apiVersion": "batch/v1", "kind": "Job", "name": owner_name, "uid": owner_uid}
    metadata = {**manifest.get("metadata", {}), "ownerReferences": [reference]}
    return {**manifest, "metadata": metadata}


def custom_objects() -> client.CustomObjectsApi:
    configuration = client.Configuration()
    config.load_incluster_config(client_configuration=configuration)
    return client.CustomObjectsApi(client.ApiClient(configuration))


def submit(submission: Submission, api: Any, environ: dict[str, str], stop: threading.Event) -> int:
    """The steps of the module docstring; the exit code."""
    for wait in submission.waits:
        result = wait_for(wait, stopped=stop.wait)
        print(result.line, flush=True)
        if result.outcome == "stopped":
            return SIGTERM_EXIT_CODE
        if result.outcome != "ready":
            print("not submitting the training job: no Trainium node is asked for", flush=True)
            return DEADLINE_EXIT_CODE
    budget = submission.budget
    if budget is not None:
        spent = spend(budget)
        if spent.usd >= budget.usd or stop_requested(budget) is not None:
            print(
                f"not submitting the training job: its spend ${spent.usd:,.2f} is at its ceiling of "
                f"${budget.usd:,.2f}; raise training_budget_usd and redeploy",
                flush=True,
            )
            return BUDGET_EXIT_CODE
    with open(submission.manifest_file) as f:
        manifest = json.load(f)
    body = owned(manifest, owner_name=environ[JOB_NAME_ENV], owner_uid=environ[JOB_UID_ENV])
    name = body["metadata"]["name"]
    try:
        api.create_namespaced_custom_object(
            GROUP, VERSION, submission.namespace, PLURAL, body, _request_timeout=REQUEST_TIMEOUT_S
        )
    except ApiException as e:
        if e.status == 409:
            print(f"training job {name}: already submitted", flush=True)
            return 0
        print(f"training job {name}: not submitted: {e.status} {e.reason}", flush=True)
        return 1
    print(f"training job {name}: submitted (owned by Job {environ[JOB_NAME_ENV]})", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m training.launch.submit '<submission JSON>'", file=sys.stderr)
        return 2
    try:
        submission = Submission.loads(args[0])
    except (ValueError, KeyError, TypeError) as e:
        print(f"submitter: {e}", file=sys.stderr)
        return 2
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    return submit(submission, custom_objects(), dict(os.environ), stop)


if __name__ == "__main__":
    sys.exit(main())
