"""The pod program's decisions, each with real child processes (tests.trainium_job.pod_program.standins)
and no cluster: skip a finished phase, which pod exports, what a deadline does, which exit code
means what, the fabric check once, the precompile once per cache set, the spend ceiling."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.trainium_job.pod_program.standins import Standins
from trainium_job.exit_codes import BUDGET_EXIT_CODE, DEADLINE_EXIT_CODE, SIGTERM_EXIT_CODE
from trainium_job.launch import RDZV_CONF_ENV
from trainium_job.paths import RESTART_LEDGER
from trainium_job.pod_program import description as d
from trainium_job.pod_program.children import Children
from trainium_job.pod_program.program import STOPPED_EXPORT, Pod, Program
from trainium_job.pod_program.spend import STOP
from trainium_job.restarts import read
from trainium_job.waits import Wait, write_failed

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture()
def s(tmp_path: Path) -> Standins:
    return Standins(tmp_path)


def phase(
    s: Standins, n: int, *, train: tuple[str, ...] = (), export: bool = False, **changes: object
) -> d.Phase:
    """Phase ``n`` under the test's folder: its data already staged, its training run ending
    complete unless ``train`` says otherwise."""
    root = s.root
    run = root / f"run{n}"
    data = root / f"data{n}"
    data.mkdir(exist_ok=True)
    (data / ".staged").touch()
    built = d.Phase(
        name=f"phase {n}",
        run_dir=str(run),
        complete_marker=str(run / "COMPLETE"),
        train=train or s.argv(f"train{n}", "--touch", str(run / "COMPLETE"), "--env", "NEURON_CC_FLAGS"),
        waits=(Wait(what=f"phase {n}'s dataset", ready=str(data / ".staged"), deadline_s=5, poll_s=1),),
        env=(("NEURON_CC_FLAGS", f"--cache_dir={root / f'cache{n}'}"),),
        make_dirs=(str(run), str(root / f"cache{n}")),
        precompile=d.Precompile(
            argv=s.argv(f"precompile{n}"), marker=str(root / f"cache{n}" / ".precompiled"), deadline_s=30
        ),
        export=(
            d.Export(
                argv=s.argv(f"export{n}", "--touch", str(run / "model" / "config.json")),
                model_dir=str(run / "model"),
                deadline_s=5,
            )
            if export
            else None
        ),
    )
    return dataclasses.replace(built, **changes)  # type: ignore[arg-type]


def job(s: Standins, *phases: d.Phase, **changes: object) -> d.JobDescription:
    built = d.JobDescription(
        job="job",
        nodes=2,
        phases=phases,
        driver_check=s.argv("driver"),
        rendezvous=d.Rendezvous(host="job-worker-0", conf=(("join_timeout", "900"),)),
        fabric_check=d.FabricCheck(
            measure=s.argv("measure"), verdict=s.argv("verdict"), result_file=str(s.root / "fabric.json")
        ),
        grace_s=12,
    )
    return dataclasses.replace(built, **changes)  # type: ignore[arg-type]


def run(
    description: d.JobDescription,
    *,
    index: int = 0,
    host: str = "job-worker-0",
    env: dict[str, str] | None = None,
) -> tuple[int, list[str]]:
    lines: list[str] = []
    pod = Pod(hostname=host, node=f"node-{index}", task_index=index, env={**os.environ, **(env or {})})
    program = Program(description, pod, children=Children(kill_after_s=2, tick_s=0.05), say=lines.append)
    return program.run(), lines


def test_given_two_phases_when_run_then_each_step_in_order_and_the_fabric_check_once(s):
    code, _ = run(job(s, phase(s, 1), phase(s, 2)))
    assert code == 0
    assert s.names() == ["driver", "precompile1", "measure", "verdict", "train1", "precompile2", "train2"]


def test_given_a_complete_phase_then_it_is_not_run_again_and_the_next_one_trains(s):
    first = phase(s, 1)
    Path(first.complete_marker).parent.mkdir(parents=True)
    Path(first.complete_marker).touch()
    code, lines = run(job(s, first, phase(s, 2)))
    assert code == 0
    assert "train1" not in s.names() and "precompile1" not in s.names()
    assert s.names()[-1] == "train2"
    assert any("phase 1" in line and "is complete, not run again" in line for line in lines)


def test_given_every_phase_complete_then_no_check_and_no_training_runs(s):
    phases = [phase(s, 1), phase(s, 2)]
    for p in phases:
        Path(p.run_dir).mkdir(parents=True)
        Path(p.complete_marker).touch()
    code, _ = run(job(s, *phases))
    assert code == 0 and s.names() == ["driver"]


def test_given_a_cache_set_precompiled_then_the_trial_run_is_skipped(s):
    first = phase(s, 1)
    assert first.precompile is not None
    Path(first.precompile.marker).parent.mkdir(parents=True)
    Path(first.precompile.marker).touch()
    run(job(s, first))
    assert "precompile1" not in s.names()


def test_given_a_failed_precompile_then_its_code_ends_the_pod_and_no_marker_is_written(s):
    first = phase(s, 1)
    assert first.precompile is not None
    failing = dataclasses.replace(first.precompile, argv=s.argv("precompile1", "--exit", "3"))
    code, _ = run(job(s, dataclasses.replace(first, precompile=failing)))
    assert code == 3 and not Path(failing.marker).exists() and "train1" not in s.names()


def test_given_a_precompile_past_its_deadline_then_it_is_stopped_and_the_job_aborted(s):
    first = phase(s, 1)
    assert first.precompile is not None
    slow = dataclasses.replace(first.precompile, argv=s.argv("precompile1", "--sleep", "60"), deadline_s=1)
    t0 = time.monotonic()
    code, lines = run(job(s, dataclasses.replace(first, precompile=slow)))
    assert code == DEADLINE_EXIT_CODE and time.monotonic() - t0 < 10
    assert "precompile1 stopped" in s.calls()
    assert any("ran past its 1 s" in line for line in lines)


def test_given_the_driver_check_refuses_then_the_pod_ends_with_its_code_at_once(s):
    code, _ = run(job(s, phase(s, 1), driver_check=s.argv("driver", "--exit", "78")))
    assert code == 78 and s.names() == ["driver"]


def test_given_a_failing_fabric_verdict_then_its_code_ends_the_pod_before_training(s):
    check = d.FabricCheck(
        measure=s.argv("measure"),
        verdict=s.argv("verdict", "--exit", "69"),
        result_file=str(s.root / "f.json"),
    )
    code, _ = run(job(s, phase(s, 1), fabric_check=check))
    assert code == 69 and "train1" not in s.names()


def test_given_the_verdict_then_it_gets_the_seconds_the_check_took(s, tmp_path):
    check = d.FabricCheck(
        measure=s.argv("measure", "--sleep", "1.2"),
        verdict=(
            sys.executable,
            "-c",
            "import sys; open(sys.argv[1], 'w').write(sys.argv[2:][-1])",
            str(tmp_path / "v"),
        ),
        result_file=str(tmp_path / "f.json"),
    )
    run(job(s, phase(s, 1), fabric_check=check))
    assert int((tmp_path / "v").read_text()) >= 1


def test_given_a_phase_short_of_its_max_steps_then_the_pod_ends_0_and_the_next_phase_waits(s):
    short = phase(s, 1, train=s.argv("train1"))  # no COMPLETE written
    code, lines = run(job(s, short, phase(s, 2)))
    assert code == 0 and "train2" not in s.names()
    assert any("ended before its --max_steps" in line for line in lines)


def test_given_training_fails_then_its_code_ends_the_pod_and_the_ledger_names_the_cause(s, monkeypatch):
    monkeypatch.setenv("NODE_NAME", "node-0")  # the ledger names the node the downward API gives
    failing = phase(s, 1, train=s.argv("train1", "--exit", "1"))
    code, _ = run(job(s, failing))
    assert code == 1
    (entry,) = read(Path(failing.run_dir) / RESTART_LEDGER)
    assert (entry.event, entry.cause, entry.exit_code, entry.host) == ("end", "failure", 1, "node-0")


def test_given_pod_0_then_it_exports_each_finished_phase_and_pod_1_does_not(s):
    phases = [phase(s, 1, export=True), phase(s, 2, export=True)]
    code, _ = run(job(s, *phases), index=0)
    assert code == 0 and {"export1", "export2"} <= set(s.names())
    s.log.unlink()
    for p in phases:
        for f in (p.complete_marker, str(Path(p.run_dir) / "model" / "config.json")):
            Path(f).unlink()
    code, _ = run(job(s, *phases), index=1, host="job-worker-1")
    assert code == 0 and not {"export1", "export2"} & set(s.names())


def test_given_an_exported_phase_then_a_rerun_does_not_export_it_again(s):
    p = phase(s, 1, export=True)
    run(job(s, p))
    s.log.unlink()
    run(job(s, p))
    assert "export1" not in s.names()


def test_given_a_failed_export_then_the_pod_fails_after_its_phases(s):
    p = phase(s, 1, export=True)
    assert p.export is not None
    failing = dataclasses.replace(p.export, argv=s.argv("export1", "--exit", "2"))
    code, lines = run(job(s, dataclasses.replace(p, export=failing), phase(s, 2)))
    assert code == 1 and "train2" in s.names()
    assert any("the export failed" in line for line in lines)


BUCKET_ENV = "TEST_MODEL_BUCKET"


def uploaded(s: Standins, n: int, *, exit_code: int = 0, **changes: object) -> d.Phase:
    """Phase ``n``, exported and uploaded (by a stand-in that logs whether the ceiling's export
    mark of a $2 ceiling is there when it starts)."""
    p = phase(s, n, export=True, **changes)
    assert p.export is not None
    mark = Path(p.run_dir) / "model.stop-at-2-usd.exported"
    upload = d.Upload(
        argv=s.argv(f"upload{n}", "--exit", str(exit_code), "--exists", str(mark)),
        bucket_env=BUCKET_ENV,
        prefix=f"run{n}/model",
    )
    return dataclasses.replace(p, export=dataclasses.replace(p.export, upload=upload))


def test_given_a_bucket_then_the_exporting_pod_uploads_each_phase_after_its_export(s):
    phases = [uploaded(s, 1), uploaded(s, 2)]
    code, lines = run(job(s, *phases), env={BUCKET_ENV: "models"})
    assert code == 0
    names = s.names()
    assert names.index("export1") < names.index("upload1") and names.index("export2") < names.index("upload2")
    assert any("uploading the model to s3://models/run1/model" in line for line in lines)


def test_given_no_bucket_then_the_model_stays_on_fsx_and_the_line_says_so(s):
    code, lines = run(job(s, uploaded(s, 1)), env={BUCKET_ENV: ""})
    assert code == 0 and "export1" in s.names() and "upload1" not in s.names()
    assert any(
        f"stays on FSx at {s.root / 'run1' / 'model'}" in line and BUCKET_ENV in line for line in lines
    )


def test_given_a_failed_upload_then_the_pod_does_not_fail_and_the_line_names_where_the_model_is(s):
    code, lines = run(job(s, uploaded(s, 1, exit_code=1)), env={BUCKET_ENV: "models"})
    assert code == 0  # no gang restart for the bucket's sake: the model is on FSx
    assert any("the upload to s3://models/run1/model failed (1)" in line for line in lines)


def test_given_an_exported_phase_then_a_rerun_uploads_it_again_and_does_not_export_it(s):
    p = uploaded(s, 1)
    run(job(s, p), env={BUCKET_ENV: "models"})
    s.log.unlink()
    code, lines = run(job(s, p), env={BUCKET_ENV: "models"})
    assert code == 0 and s.names() == ["driver", "upload1"]
    assert any("uploading the model to s3://models/run1/model" in line for line in lines)


def test_given_the_ceiling_then_the_stopped_run_is_uploaded_before_the_others_are_released(s):
    long_run = uploaded(s, 1, train=s.argv("train1", "--sleep", "60"))
    code, _ = run(job(s, long_run, budget=budget(s, usd=2.0)), env={BUCKET_ENV: "models"})
    assert code == BUDGET_EXIT_CODE
    assert s.names().index("export1") < s.names().index("upload1")
    mark = Path(long_run.run_dir) / "model.stop-at-2-usd.exported"
    # Uploaded before the mark the other pods end on (their end aborts the Job, this pod too).
    assert f"{mark}=0" in [c for c in s.calls() if c.startswith("upload1")][0] and mark.exists()


def test_given_a_dataset_that_never_comes_then_the_wait_ends_at_its_deadline_with_the_abort_code(s):
    p = phase(s, 1)
    absent = dataclasses.replace(
        p.waits[0], ready=str(s.root / "never" / ".staged"), deadline_s=1, why="test bound"
    )
    t0 = time.monotonic()
    code, lines = run(job(s, dataclasses.replace(p, waits=(absent,))))
    assert code == DEADLINE_EXIT_CODE and time.monotonic() - t0 < 5
    assert s.names() == ["driver"]
    assert any(
        "after its deadline of 1 s (test bound)" in line and "release its nodes" in line for line in lines
    )


def test_given_its_staging_gave_up_then_the_wait_ends_at_once_with_the_reason(s):
    p = phase(s, 1)
    marker, failed = s.root / "d" / ".staged", str(s.root / "d" / ".failed")
    wait = Wait(
        what="phase 1's dataset", ready=str(marker), deadline_s=60, failed=failed, failed_by="stage-abc"
    )
    write_failed(failed, by="stage-abc", reason="the source is gone (404)")
    t0 = time.monotonic()
    code, lines = run(job(s, dataclasses.replace(p, waits=(wait,))))
    assert code == DEADLINE_EXIT_CODE and time.monotonic() - t0 < 5
    assert any("stage-abc gave up: the source is gone (404)" in line for line in lines)


def test_given_a_failed_marker_of_another_producer_then_it_does_not_count(s):
    p = phase(s, 1)
    failed = str(s.root / "d" / ".failed")
    wait = Wait(
        what="data", ready=str(s.root / "d" / ".staged"), deadline_s=1, failed=failed, failed_by="stage-new"
    )
    write_failed(failed, by="stage-old", reason="an earlier deploy's failure")
    code, lines = run(job(s, dataclasses.replace(p, waits=(wait,))))
    assert code == DEADLINE_EXIT_CODE
    assert not any("gave up" in line for line in lines) and any("deadline" in line for line in lines)


def test_given_phase_2_data_failed_then_phase_1_is_exported_before_the_pod_ends(s):
    first, second = phase(s, 1, export=True), phase(s, 2)
    failed = str(s.root / "d2" / ".failed")
    wait = Wait(
        what="phase 2's dataset",
        ready=str(s.root / "d2" / ".staged"),
        deadline_s=9,
        failed=failed,
        failed_by="stage-2",
    )
    write_failed(failed, by="stage-2", reason="import refused")
    code, _ = run(job(s, first, dataclasses.replace(second, waits=(wait,))))
    assert code == DEADLINE_EXIT_CODE
    assert "train1" in s.names() and "export1" in s.names() and "train2" not in s.names()
    assert (Path(first.run_dir) / "model" / "config.json").exists()


def test_given_the_c10d_rendezvous_then_only_the_store_host_pod_says_is_host(s):
    code, _ = run(job(s, phase(s, 1, train=s.argv("train1", "--env", RDZV_CONF_ENV))), host="job-worker-0")
    assert code == 0
    code, _ = run(
        job(s, phase(s, 2, train=s.argv("train2", "--env", RDZV_CONF_ENV))), host="job-worker-1", index=1
    )
    calls = dict(line.split(" ", 1) for line in s.calls() if line.startswith("train"))
    assert calls["train1"] == f"{RDZV_CONF_ENV}=is_host=1,join_timeout=900"
    assert calls["train2"] == f"{RDZV_CONF_ENV}=is_host=0,join_timeout=900"


def test_given_a_phase_then_its_commands_get_its_compile_cache(s):
    run(job(s, phase(s, 1), phase(s, 2)))
    calls = {line.split()[0]: line for line in s.calls()}
    assert calls["train2"].endswith(f"NEURON_CC_FLAGS=--cache_dir={s.root / 'cache2'}")


# --- the spend ceiling ------------------------------------------------------------------------


def budget(s: Standins, usd: float, *, per_hour: float = 3600.0, node_start_s: int = 0) -> d.Budget:
    return d.Budget(
        usd=usd,
        usd_per_node_hour=per_hour,
        spend_dir=str(s.root / "spend"),
        node_start_s=node_start_s,
        check_every_s=1,
    )


def test_given_a_tiny_ceiling_then_training_stops_the_phase_in_flight_is_exported_and_the_job_aborted(s):
    long_run = phase(s, 1, export=True, train=s.argv("train1", "--sleep", "60"))
    t0 = time.monotonic()
    code, lines = run(job(s, long_run, budget=budget(s, usd=2.0)))  # $1 a second
    assert code == BUDGET_EXIT_CODE and time.monotonic() - t0 < 20
    assert "train1 stopped" in s.calls() and "export1" in s.names()
    assert (Path(long_run.run_dir) / STOPPED_EXPORT).exists()
    assert any("reached the ceiling of $2.00" in line for line in lines)
    (entry,) = read(Path(long_run.run_dir) / RESTART_LEDGER)
    assert entry.cause == "budget"


def test_given_another_pod_stopped_at_the_ceiling_then_this_one_stops_and_waits_for_the_export(s):
    long_run = phase(s, 1, export=True, train=s.argv("train1", "--sleep", "60"))
    b = budget(s, usd=1000.0)

    def other_pod() -> None:  # pod 0 reaches the ceiling while this pod trains, and exports
        while "train1" not in s.names():
            time.sleep(0.02)
        (Path(b.spend_dir) / STOP).write_text(json.dumps({"ceiling_usd": 1000.0, "time": 1234.0}))
        (Path(long_run.run_dir) / "model.stop-at-1000-usd.exported").touch()

    threading.Thread(target=other_pod, daemon=True).start()
    code, _ = run(job(s, long_run, budget=b), index=1, host="job-worker-1")
    assert code == BUDGET_EXIT_CODE and "train1 stopped" in s.calls() and "export1" not in s.names()


def test_given_a_job_at_its_ceiling_then_a_new_start_ends_at_once_without_training(s):
    b = budget(s, usd=1000.0)
    Path(b.spend_dir).mkdir(parents=True)
    (Path(b.spend_dir) / STOP).write_text(json.dumps({"ceiling_usd": 1000.0, "time": 1.0}))
    code, lines = run(job(s, phase(s, 1), budget=b))
    assert code == BUDGET_EXIT_CODE and s.names() == []
    assert any("at the ceiling of $1,000.00: not starting" in line for line in lines)


def test_given_a_stop_marker_of_a_lower_ceiling_then_a_raised_ceiling_trains_on(s):
    b = budget(s, usd=1000.0)
    Path(b.spend_dir).mkdir(parents=True)
    (Path(b.spend_dir) / STOP).write_text(json.dumps({"ceiling_usd": 2.0, "time": 1.0}))
    code, _ = run(
        job(
            s,
            phase(
                s, 1, train=s.argv("train1", "--sleep", "0.5", "--touch", str(s.root / "run1" / "COMPLETE"))
            ),
            budget=b,
        )
    )
    assert code == 0


def test_given_a_run_exported_at_a_stop_then_its_final_export_replaces_it(s):
    p = phase(s, 1, export=True)
    Path(p.run_dir, "model").mkdir(parents=True)
    Path(p.run_dir, "model", "config.json").touch()
    Path(p.run_dir, STOPPED_EXPORT).touch()
    code, _ = run(job(s, p))
    assert code == 0 and "export1" in s.names() and not Path(p.run_dir, STOPPED_EXPORT).exists()


# --- the pod's SIGTERM, as the kubelet sends it ------------------------------------------------


def start_program(description: d.JobDescription) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", d.MODULE, d.dumps(description)],
        cwd=REPO,
        env={**os.environ, "HOSTNAME": "job-worker-1", "NODE_NAME": "node-1", "VC_TASK_INDEX": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_given_a_sigterm_while_training_then_the_child_gets_it_and_the_pod_ends_143(s):
    p = phase(s, 1, train=s.argv("train1", "--sleep", "60"))
    proc = start_program(job(s, p))
    deadline = time.monotonic() + 30
    while "train1" not in s.names() and time.monotonic() < deadline:
        time.sleep(0.05)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == SIGTERM_EXIT_CODE and time.monotonic() - t0 < 10
    assert "train1 stopped" in s.calls()
    (entry,) = read(Path(p.run_dir) / RESTART_LEDGER)
    assert (entry.cause, entry.exit_code) == ("preemption", SIGTERM_EXIT_CODE)


def test_given_a_sigterm_while_waiting_then_the_pod_ends_143_at_once(s):
    p = phase(s, 1)
    absent = dataclasses.replace(p.waits[0], ready=str(s.root / "never"), deadline_s=300, poll_s=30)
    proc = start_program(job(s, dataclasses.replace(p, waits=(absent,))))
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("waiting for"):
            break
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == SIGTERM_EXIT_CODE and time.monotonic() - t0 < 5


def test_given_a_child_that_ignores_sigterm_then_it_is_killed_within_the_grace_period(s, tmp_path):
    ignore = "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); open(sys.argv[1], 'w')"
    stubborn = (sys.executable, "-c", f"{ignore}; time.sleep(120)", str(tmp_path / "started"))
    p = phase(s, 1, train=stubborn)
    proc = start_program(job(s, p, grace_s=12))  # killed 12 - 10 = 2 s after the stop
    deadline = time.monotonic() + 30
    while not (tmp_path / "started").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == SIGTERM_EXIT_CODE
    assert time.monotonic() - t0 < 12  # within the grace period: the ledger's line is written
    assert read(Path(p.run_dir) / RESTART_LEDGER)


def test_given_a_description_of_another_version_then_the_program_refuses_it_in_one_line():
    done = subprocess.run(
        [sys.executable, "-m", d.MODULE, '{"version": 99}'],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "pod program: job description version 99: this program runs version 1 "
        "(the image is older or newer than the job: rebuild and redeploy both)"
    ]


def test_given_a_pod_then_its_metrics_say_how_long_it_held_its_node_without_training_and_its_bound(s):
    pod = Pod(hostname="job-worker-0", node="node-0", task_index=0, env=dict(os.environ))
    first = phase(s, 1)
    description = job(s, first, checks_s=300)
    program = Program(description, pod, children=Children(kill_after_s=2, tick_s=0.05), say=lambda _: None)
    before = program.metrics.text()
    assert "trainium_job_not_training_since_timestamp_seconds" in before
    assert program.run() == 0
    after = program.metrics.text()
    assert f"trainium_job_start_bound_seconds {float(description.bound_s(first))!r}" in after
    assert description.bound_s(first) == first.waits[0].deadline_s + 30 + 300
    assert "trainium_job_not_training_since_timestamp_seconds" in after  # training ended
