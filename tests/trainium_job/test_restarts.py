"""The restart ledger: its lines, how they group into restarts, the time lost, the summary line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from trainium_job import restarts as r
from trainium_job.fabric_check_steps import EXIT_CODE as FABRIC_EXIT_CODE
from trainium_job.fabric_check_steps import NOT_MEASURED_EXIT_CODE
from trainium_job.hang import HANG_EXIT_CODE
from trainium_job.paths import HANG_MARKERS, RESTART_LEDGER, job_paths

T0 = 1_767_225_600.0  # some Unix time


def end(t: float, cause: str, host: str = "n1", *, checkpoint_time: float | None = None) -> r.Entry:
    return r.Entry(event="end", time=T0 + t, host=host, cause=cause, checkpoint_time=checkpoint_time)


def resume(t: float) -> r.Entry:
    return r.Entry(event="resume", time=T0 + t, host="n1")


def checkpoint(run_dir: Path, step: int, mtime: float) -> None:
    d = run_dir / r.CHECKPOINT_DIR / f"step_{step:08d}"
    d.mkdir(parents=True)
    (d / "meta.json").write_text("{}")
    os.utime(d / "meta.json", (mtime, mtime))


@pytest.mark.parametrize(
    "code, cause",
    [
        (78, "driver"),
        (FABRIC_EXIT_CODE, "fabric"),
        (NOT_MEASURED_EXIT_CODE, "fabric"),
        (143, "preemption"),
        (HANG_EXIT_CODE, "hang"),
        (1, "failure"),
        (137, "failure"),
    ],
)
def test_given_an_exit_code_then_its_cause(code, cause):
    assert r.cause_of(code) == cause


def test_given_the_job_paths_then_the_ledger_is_in_the_run_directory():
    paths = job_paths(dataset_name="d", cache_set="c", run_name="run1")
    assert paths.restart_ledger == f"{paths.output_dir}/{RESTART_LEDGER}" == "/data/runs/run1/restarts.jsonl"


def test_given_entries_then_a_line_each_round_trips_and_a_torn_or_foreign_line_is_skipped(tmp_path):
    ledger = tmp_path / RESTART_LEDGER
    entries = [
        r.Entry(event="end", time=T0, host="n1", cause="hang", exit_code=86, step=12, checkpoint=10),
        r.Entry(event="resume", time=T0 + 60, host="n1", checkpoint=10),
    ]
    r.append(ledger, entries[:1])
    with ledger.open("a") as f:
        f.write('{"event": "end", "time": 17672')  # torn
        f.write("\n" + json.dumps({"event": "end", "time": T0, "cause": "cosmic rays"}) + "\n")
    r.append(ledger, entries[1:])
    assert r.read(ledger) == entries
    assert all(line.startswith("{") for line in ledger.read_text().splitlines()[:1])
    assert '"exit_code": 86' in ledger.read_text() and "null" not in ledger.read_text()  # no empty fields
    assert r.read(tmp_path / "none.jsonl") == []


def test_given_a_hang_and_the_pods_volcano_stopped_then_one_restart_caused_by_the_hang():
    entries = [
        resume(0),
        end(600, "failure", "n1", checkpoint_time=T0 + 500),  # torchrun's 1 after its workers' 86
        end(601, "hang", "n1", checkpoint_time=T0 + 500),  # the watchdog's marker
        end(640, "preemption", "n2", checkpoint_time=T0 + 500),  # stopped by Volcano's RestartJob
        resume(900),
    ]
    (only,) = r.restarts(entries)
    assert only.cause == "hang"
    assert only.nodes == {"n1": "hang"}
    assert only.lost_s == 400  # from the checkpoint at 500 to the resume at 900


def test_given_lost_time_then_it_starts_at_the_newest_point_the_run_could_go_back_to():
    entries = [
        resume(0),
        end(100, "failure", checkpoint_time=T0 - 1000),  # the checkpoint predates the attempt's start
        resume(160),
        end(500, "preemption", checkpoint_time=T0 + 490),  # the stop's own checkpoint
        resume(800),
        end(1000, "driver"),  # a new pod's check: no checkpoint newer than the start at 800
        end(1400, "fabric", "n2"),  # the next attempt, 400 s later, still no start
        resume(2000),
    ]
    found = r.restarts(entries)
    assert [x.cause for x in found] == ["failure", "preemption", "driver", "fabric"]
    # since the attempt's start / the stop's checkpoint / the start at 800 up to the next incident /
    # that incident to the next start
    assert [x.lost_s for x in found] == [160, 310, 600, 600]


def test_given_no_resume_after_a_restart_then_its_lost_time_ends_with_its_last_line():
    (only,) = r.restarts([end(0, "failure", checkpoint_time=T0 - 50), end(30, "preemption", "n2")])
    assert only.lost_s == 80 and only.cause == "failure"


def test_given_totals_then_the_summary_is_one_line_by_cause_with_the_nodes_named():
    entries = [
        resume(0),
        end(600, "hang", "ip-10-0-1-5", checkpoint_time=T0 + 60),
        end(610, "preemption", "ip-10-0-1-6"),
        resume(660),
        end(1000, "preemption", "ip-10-0-1-5", checkpoint_time=T0 + 1000),
        resume(1240),
        end(2000, "preemption", "ip-10-0-1-6", checkpoint_time=T0 + 2000),
        resume(2060),
    ]
    totals = r.totals(r.restarts(entries))
    assert totals.count == {**dict.fromkeys(r.CAUSES, 0), "hang": 1, "preemption": 2}
    assert totals.nodes == {("ip-10-0-1-5", "hang"): 1}
    assert r.summary_line(totals) == (
        "restarts: 3 (hang 1, preemption 2); lost 15 min (hang 10, preemption 5); "
        "nodes named: ip-10-0-1-5 (hang 1)"
    )


def test_given_no_restart_then_the_summary_says_none():
    assert r.summary_line(r.totals(r.restarts([resume(0)]))) == "restarts: none"


def test_given_a_short_loss_then_it_is_said_in_seconds():
    line = r.summary_line(
        r.totals(r.restarts([resume(0), end(10, "failure", checkpoint_time=T0), resume(40)]))
    )
    assert line == "restarts: 1 (failure 1); lost 40 s (failure 40); nodes named: none"


def test_given_hang_markers_then_one_line_per_node_and_the_markers_are_gone(tmp_path, monkeypatch):
    checkpoint(tmp_path, 200, T0 + 5)
    checkpoint(tmp_path, 400, T0 + 50)
    (tmp_path / r.CHECKPOINT_DIR / ".step_00000600.partial").mkdir()  # not committed: not counted
    for host, rank in (("n1", 0), ("n1", 1), ("n2", 2)):
        monkeypatch.setenv("NODE_NAME", host)
        r.write_hang_marker(
            tmp_path, rank=rank, step=456, waiting_for=f"rank {rank}'s all-reduce", last_checkpoint=400
        )
    assert len(list((tmp_path / HANG_MARKERS).iterdir())) == 3
    entries = r.drain_hang_markers(tmp_path, by="trainer")
    assert [(e.host, e.cause, e.exit_code, e.step, e.checkpoint) for e in entries] == [
        ("n1", "hang", 86, 456, 400),
        ("n2", "hang", 86, 456, 400),
    ]
    assert entries[0].detail == "rank 0's all-reduce" and entries[0].checkpoint_time == T0 + 50
    assert list((tmp_path / HANG_MARKERS).iterdir()) == []
    assert r.drain_hang_markers(tmp_path, by="script") == []  # recorded once


def test_given_the_script_exits_then_its_line_and_the_markers_are_appended_once(tmp_path, monkeypatch):
    monkeypatch.setenv("NODE_NAME", "n2")
    assert r.record_end(tmp_path, 0) == [] and not (tmp_path / RESTART_LEDGER).exists()
    monkeypatch.setenv("NODE_NAME", "n1")
    r.write_hang_marker(tmp_path, rank=0, step=9, waiting_for="x", last_checkpoint=None)
    monkeypatch.setenv("NODE_NAME", "n2")
    r.record_end(tmp_path, 1, now=T0)
    got = [(e.host, e.cause, e.exit_code, e.by) for e in r.read(tmp_path / RESTART_LEDGER)]
    assert got == [("n1", "hang", 86, "script"), ("n2", "failure", 1, "script")]


def test_given_a_start_after_torchrun_restarted_its_workers_then_a_failure_unless_a_marker_says_hang(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("NODE_NAME", "n1")
    first = r.record_start(tmp_path, checkpoint=None, torchrun_restart=0, now=T0)
    assert [e.event for e in first] == ["resume"]
    again = r.record_start(tmp_path, checkpoint=None, torchrun_restart=1, now=T0 + 100)
    assert [(e.event, e.cause, e.by) for e in again] == [
        ("end", "failure", "trainer"),
        ("resume", None, None),
    ]
    r.write_hang_marker(tmp_path, rank=3, step=7, waiting_for="x", last_checkpoint=None)
    third = r.record_start(tmp_path, checkpoint=None, torchrun_restart=2, now=T0 + 200)
    assert [(e.event, e.cause) for e in third] == [("end", "hang"), ("resume", None)]
    assert r.ledger_summary(tmp_path).startswith("restarts: 2 (hang 1, failure 1); ")


def test_given_the_command_line_then_the_end_is_recorded_and_the_summary_printed(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("NODE_NAME", "n1")
    (tmp_path / "run").mkdir()
    assert r.main(["end", "--run-dir", str(tmp_path / "run"), "--exit-code", "143"]) == 0
    assert capsys.readouterr().err == ""  # silent when written
    (line,) = r.read(tmp_path / "run" / RESTART_LEDGER)
    assert (line.cause, line.exit_code, line.host) == ("preemption", 143, "n1")
    assert r.main(["summary", "--run-dir", str(tmp_path / "run")]) == 0
    assert capsys.readouterr().out.startswith("restarts: 1 (preemption 1); lost ")


def test_given_an_unwritable_ledger_then_the_command_still_exits_0(tmp_path, capsys):
    (tmp_path / RESTART_LEDGER).mkdir()  # os.open of a directory for writing fails, even as root
    assert r.main(["end", "--run-dir", str(tmp_path), "--exit-code", "1"]) == 0
    assert "restart ledger: not written" in capsys.readouterr().err


def test_given_a_pod_that_ends_before_its_run_directory_exists_then_nothing_is_written(tmp_path):
    # The worker script creates the run directory after the dataset wait: a pod stopped or failed
    # before it (the driver check, the wait) began no attempt, and leaves FSx as it found it.
    assert r.record_end(tmp_path / "run", 143) == []
    assert r.record_end(tmp_path / "run", 78) == []
    assert list(tmp_path.iterdir()) == []
