"""The submitter's decisions, without a cluster: it creates the Volcano Job only once its waits
are over and the spend is under the ceiling, owned by its own batch Job; each other outcome is one
line and the exit code its Job's pod failure policy reads."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from training.launch.submit import GROUP, PLURAL, VERSION, submit
from trainium_job.exit_codes import BUDGET_EXIT_CODE, DEADLINE_EXIT_CODE, SIGTERM_EXIT_CODE
from trainium_job.pod_program.description import Budget
from trainium_job.pod_program.spend import write_record
from trainium_job.submission import JOB_NAME_ENV, JOB_UID_ENV, Submission
from trainium_job.waits import Wait, write_failed

ENV = {JOB_NAME_ENV: "submit-trn-bert-abc", JOB_UID_ENV: "0f1e2d3c-0000-4000-8000-000000000001"}
JOB = {
    "apiVersion": f"{GROUP}/{VERSION}",
    "kind": "Job",
    "metadata": {"name": "trn-bert-abc", "namespace": "training"},
}


class FakeApi:
    """``CustomObjectsApi.create_namespaced_custom_object``, recorded; raises ``status`` if given."""

    def __init__(self, status: int | None = None) -> None:
        self.status = status
        self.calls: list[tuple[Any, ...]] = []

    def create_namespaced_custom_object(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        self.calls.append((args, kwargs))
        if self.status is not None:
            raise ApiException(status=self.status, reason="refused")
        return args[4]


def _submission(tmp_path: Path, *, waits: tuple[Wait, ...] = (), budget: Budget | None = None) -> Submission:
    manifest = tmp_path / "job.json"
    manifest.write_text(json.dumps(JOB))
    return Submission(namespace="training", manifest_file=str(manifest), waits=waits, budget=budget)


def _wait(tmp_path: Path, *, deadline_s: int = 5) -> Wait:
    return Wait(
        what="phase 1's shards",
        ready=str(tmp_path / "shards" / ".staged"),
        deadline_s=deadline_s,
        failed=str(tmp_path / "shards.staging-failed"),
        failed_by="stage-dataset-1",
        poll_s=1,
    )


def test_given_the_data_there_then_the_job_is_created_owned_by_the_submitters_job(tmp_path, capsys):
    wait = _wait(tmp_path)
    Path(wait.ready).parent.mkdir()
    Path(wait.ready).touch()
    api = FakeApi()
    assert submit(_submission(tmp_path, waits=(wait,)), api, ENV, threading.Event()) == 0
    ((args, kwargs),) = api.calls
    # Volcano's CRD: group batch.volcano.sh, version v1alpha1, plural jobs (volcano-sh/volcano
    # v1.15.0 installer/helm/chart/volcano/crd/bases/batch.volcano.sh_jobs.yaml).
    assert (
        args[:4]
        == ("batch.volcano.sh", "v1alpha1", "training", "jobs")
        == (GROUP, VERSION, "training", PLURAL)
    )
    body = args[4]
    # metav1.OwnerReference's required fields: apiVersion, kind, name, uid (k8s.io/apimachinery
    # pkg/apis/meta/v1 types.go); the garbage collector deletes the Volcano Job with its owner.
    assert body["metadata"]["ownerReferences"] == [
        {"apiVersion": "batch/v1", "kind": "Job", "name": ENV[JOB_NAME_ENV], "uid": ENV[JOB_UID_ENV]}
    ]
    assert {k: v for k, v in body["metadata"].items() if k != "ownerReferences"} == JOB["metadata"]
    assert kwargs["_request_timeout"] > 0
    assert (
        "training job trn-bert-abc: submitted (owned by Job submit-trn-bert-abc)" in capsys.readouterr().out
    )


def test_given_a_staging_that_gave_up_then_nothing_is_created_and_it_ends_with_the_deadline_code(
    tmp_path, capsys
):
    wait = _wait(tmp_path, deadline_s=60)
    write_failed(str(wait.failed), by="stage-dataset-1", reason="AccessDenied on the source")
    api = FakeApi()
    assert submit(_submission(tmp_path, waits=(wait,)), api, ENV, threading.Event()) == DEADLINE_EXIT_CODE
    assert api.calls == []
    out = capsys.readouterr().out
    assert "AccessDenied on the source" in out and "no Trainium node is asked for" in out


def test_given_data_that_never_comes_then_it_ends_at_the_deadline_without_a_job(tmp_path):
    api = FakeApi()
    code = submit(_submission(tmp_path, waits=(_wait(tmp_path, deadline_s=1),)), api, ENV, threading.Event())
    assert code == DEADLINE_EXIT_CODE and api.calls == []


def test_given_a_stop_during_the_wait_then_it_ends_143_without_a_job(tmp_path):
    stop = threading.Event()
    stop.set()
    api = FakeApi()
    assert (
        submit(_submission(tmp_path, waits=(_wait(tmp_path, deadline_s=60),)), api, ENV, stop)
        == SIGTERM_EXIT_CODE
    )
    assert api.calls == []


def test_given_a_job_at_its_ceiling_then_it_is_not_submitted(tmp_path, capsys):
    budget = Budget(usd=10.0, usd_per_node_hour=36.0, spend_dir=str(tmp_path / "spend"), node_start_s=0)
    (tmp_path / "spend").mkdir()
    # An earlier attempt's node: 1,000 s at $36/h is $10.
    write_record(
        tmp_path / "spend" / "n.p.1.json", node="n", pod="p", phase="phase 1", start=0.0, last=1000.0
    )
    api = FakeApi()
    assert submit(_submission(tmp_path, budget=budget), api, ENV, threading.Event()) == BUDGET_EXIT_CODE
    assert api.calls == [] and "raise training_budget_usd and redeploy" in capsys.readouterr().out


@pytest.mark.parametrize(("status", "code"), [(409, 0), (403, 1), (500, 1)])
def test_given_an_api_answer_then_its_exit_code(tmp_path, status, code):
    # 409: this submitter's earlier attempt created it (the name changes with the job and with the
    # submitter); anything else: one line and 1, and the Job retries the pod.
    assert submit(_submission(tmp_path), FakeApi(status), ENV, threading.Event()) == code
