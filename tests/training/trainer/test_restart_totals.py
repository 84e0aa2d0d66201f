"""The trainer's side of the restart ledger: its start recorded, the totals exported, the hang marker."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.training.conftest import REPO, child_env
from training.trainer import checkpoint as ckpt
from training.trainer import restart_totals
from training.trainer.prom_metrics import TrainingMetrics
from trainium_job import exit_codes
from trainium_job import restarts as ledger
from trainium_job.hang import HANG_EXIT_CODE
from trainium_job.paths import HANG_MARKERS, RESTART_LEDGER

T0 = 1_767_225_600.0


def labelled(metrics: TrainingMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(metrics.registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if not s.name.endswith("_created")
    }


def write_ledger(run_dir: Path, *entries: ledger.Entry) -> None:
    ledger.append(run_dir / RESTART_LEDGER, entries)


def test_given_a_ledger_then_rank_0_exports_restarts_and_lost_time_by_cause_and_the_nodes_named(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("NODE_NAME", "n1")
    write_ledger(
        tmp_path,
        ledger.Entry(event="resume", time=T0),
        ledger.Entry(event="end", time=T0 + 600, host="n2", cause="hang", checkpoint_time=T0 + 500),
        ledger.Entry(event="end", time=T0 + 630, host="n1", cause="preemption", checkpoint_time=T0 + 500),
        ledger.Entry(event="resume", time=T0 + 700),
        ledger.Entry(event="end", time=T0 + 900, host="n1", cause="fabric", exit_code=75),
    )
    m = TrainingMetrics()
    totals = restart_totals.started(tmp_path, checkpoint=400, torchrun_restart=0, metrics=m)
    assert totals is not None and totals.total == 2
    got = labelled(m)
    assert got[("bert_train_restarts_total", (("cause", "hang"),))] == 1
    assert got[("bert_train_restarts_total", (("cause", "fabric"),))] == 1
    assert got[("bert_train_restarts_total", (("cause", "preemption"),))] == 0  # the hang's doing
    assert {c for (name, labels) in got if name == "bert_train_restarts_total" for _, c in labels} == set(
        ledger.CAUSES
    )
    assert got[("bert_train_lost_seconds_total", (("cause", "hang"),))] == 200  # checkpoint 500 -> resume 700
    assert got[("bert_train_suspect_nodes", ())] == 2  # n2 (hang), n1 (fabric)
    # This start is in the ledger, closing the fabric restart.
    last = ledger.read(tmp_path / RESTART_LEDGER)[-1]
    assert (last.event, last.checkpoint, last.host) == ("resume", 400, "n1")


def test_given_an_empty_run_dir_then_every_cause_is_exported_at_0_and_the_summary_says_none(tmp_path):
    m = TrainingMetrics()
    restart_totals.started(tmp_path, checkpoint=None, torchrun_restart=0, metrics=m)
    got = labelled(m)
    assert [got[("bert_train_restarts_total", (("cause", c),))] for c in ledger.CAUSES] == [0] * len(
        ledger.CAUSES
    )
    assert got[("bert_train_suspect_nodes", ())] == 0
    assert restart_totals.summary(tmp_path) == "restarts: none"


def test_given_a_torchrun_restart_then_the_start_records_a_failure_and_counts_it(tmp_path):
    restart_totals.started(tmp_path, checkpoint=None, torchrun_restart=0, metrics=None)
    totals = restart_totals.started(tmp_path, checkpoint=None, torchrun_restart=1, metrics=None)
    assert totals is not None and totals.count["failure"] == 1
    assert restart_totals.summary(tmp_path).startswith("restarts: 1 (failure 1); lost ")


def test_given_a_ledger_that_cannot_be_written_then_a_warning_and_the_run_goes_on(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with caplog.at_level(logging.WARNING):
        assert (
            restart_totals.started(blocker / "run", checkpoint=None, torchrun_restart=0, metrics=None) is None
        )
    assert "restarts are not counted" in caplog.text


def test_given_the_ledger_reader_then_it_knows_the_checkpoint_layout_and_the_exit_codes():
    from training.node.driver_check import MISMATCH_EXIT_CODE
    from training.trainer.stop import STOP_EXIT_CODE

    assert ckpt.checkpoint_root("/run").name == ledger.CHECKPOINT_DIR
    assert ledger._STEP_RE.match(ckpt.step_dir_name(1200)) and ledger._META == ckpt.META_FILE
    # The ledger names a pod's end by the one table of exit codes the programs exit with.
    assert exit_codes.DRIVER_EXIT_CODE == MISMATCH_EXIT_CODE
    assert exit_codes.SIGTERM_EXIT_CODE == STOP_EXIT_CODE
    assert (
        exit_codes.cause_of(HANG_EXIT_CODE) == "hang" and exit_codes.cause_of(MISMATCH_EXIT_CODE) == "driver"
    )


def test_given_a_checkpoint_then_the_ledger_finds_its_step_and_time(tmp_path):
    root = ckpt.checkpoint_root(tmp_path)
    (root / ckpt.step_dir_name(300)).mkdir(parents=True)
    (root / ckpt.step_dir_name(300) / ckpt.META_FILE).write_text("{}")
    newest = ledger.newest_checkpoint(tmp_path)
    assert newest is not None and newest[0] == 300


HUNG = """
import sys, threading
from pathlib import Path
from training.trainer import watchdog
w = watchdog.StepWatchdog(
    watchdog.HangBound(0.5, 10, 0), rank=3, on_expiry=lambda e: watchdog.exit_hung(e, Path(sys.argv[1]))
)
w.start(7, last_checkpoint=4)
w.doing("step 8's loss all-reduce and report")
threading.Event().wait()
"""


def test_given_a_hung_rank_then_it_leaves_a_marker_that_the_next_start_records_as_a_hang(tmp_path):
    env = {**child_env(), "NODE_NAME": "ip-10-0-1-5"}
    out = subprocess.run(
        [sys.executable, "-c", HUNG, str(tmp_path)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == HANG_EXIT_CODE, out.stderr
    (marker,) = (tmp_path / HANG_MARKERS).iterdir()
    assert marker.name == "ip-10-0-1-5.rank00003.json"
    assert json.loads(marker.read_text())["waiting_for"] == "step 8's loss all-reduce and report"
    restart_totals.started(tmp_path, checkpoint=4, torchrun_restart=1, metrics=None)
    hang, resume = ledger.read(tmp_path / RESTART_LEDGER)
    assert (hang.cause, hang.host, hang.step, hang.by) == ("hang", "ip-10-0-1-5", 7, "trainer")
    assert resume.event == "resume"
    assert "nodes named: ip-10-0-1-5 (hang 1)" in restart_totals.summary(tmp_path)
