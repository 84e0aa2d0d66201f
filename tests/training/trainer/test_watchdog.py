"""The step watchdog's bound, phases and exit, on a fake clock; its exit in a real process."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.contracts.volcano import action_for_failure, policies
from tests.training.conftest import REPO, child_env, free_port, tiny_args
from tests.training.trainer.test_prom_metrics import samples
from training.dataprep.synthetic import SyntheticShards
from training.trainer import device, pretrain, stop
from training.trainer import watchdog as watchdog_module
from training.trainer.cli import build_parser, check_args, parse_args
from training.trainer.prom_metrics import TrainingMetrics
from training.trainer.watchdog import WINDOW, Expiry, HangBound, StepWatchdog, exit_hung
from trainium_job.fabric_check_steps import EXIT_CODE as FABRIC_EXIT_CODE
from trainium_job.fabric_check_steps import NOT_MEASURED_EXIT_CODE
from trainium_job.hang import HANG_EXIT_CODE, PHASES
from trainium_job.paths import HANG_MARKERS
from trainium_job.pod import RESTART_POLICIES, abort_policies
from trainium_job.restarts import drain_hang_markers


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def tick(self, seconds: float) -> None:
        self.now += seconds


class Report:
    def __init__(self) -> None:
        self.seen: list[tuple[str, float | None]] = []

    def watchdog(self, phase: str, bound_s: float | None) -> None:
        self.seen.append((phase, bound_s))


def watchdog(floor_s=10.0, factor=3.0, warmup_steps=2, *, start_step=0, checkpoint=None, window=WINDOW):
    clock, expired, report = Clock(), list[Expiry](), Report()
    w = StepWatchdog(
        HangBound(floor_s, factor, warmup_steps, window),
        rank=5,
        report=report,
        clock=clock,
        on_expiry=expired.append,
    )
    w.start(start_step, last_checkpoint=checkpoint, thread=False)
    return w, clock, expired, report


def steps(w: StepWatchdog, clock: Clock, seconds: list[float], first: int = 1) -> None:
    for i, s in enumerate(seconds):
        clock.tick(s)
        w.stepped(first + i)


def test_given_no_step_timed_yet_then_the_bound_is_the_floor():
    assert HangBound(300, 10, 3).seconds([]) == 300


def test_given_step_times_then_the_bound_is_the_larger_of_the_floor_and_factor_x_median():
    bound = HangBound(300, 10, 3)
    assert bound.seconds([4.3] * 10) == 300  # 43 s: the floor
    assert bound.seconds([60.0, 61.0, 59.0]) == 600
    # The median, not the mean: one slow step (a checkpoint's neighbour, a GC) does not move it.
    assert bound.seconds([40.0, 40.0, 40.0, 40.0, 3000.0]) == 400


def test_given_warmup_steps_then_no_bound_until_they_are_done_and_they_are_not_timed():
    w, clock, expired, _ = watchdog(floor_s=10, factor=3, warmup_steps=2)
    assert w.phase == "warmup" and w.bound_s() is None
    clock.tick(5000)  # compiling: however long the first steps take
    assert w.check() is None
    w.stepped(1)
    clock.tick(5000)
    w.stepped(2)
    assert w.phase == "step" and w.bound_s() == 10  # the warm-up's 5000 s steps are not in the median
    steps(w, clock, [4.0, 5.0, 6.0], first=3)
    assert w.bound_s() == 15  # 3 x median 5 s
    clock.tick(15)
    assert w.check() is None and expired == []  # at the bound, not past it
    clock.tick(0.5)
    assert w.check() is not None
    (expiry,) = expired
    assert expiry.step == 5 and expiry.waited_s == 15.5 and expiry.bound_s == 15


def test_given_a_checkpoint_save_then_it_has_no_bound_and_the_next_step_is_timed_from_its_end():
    w, clock, expired, report = watchdog(floor_s=10, factor=3, warmup_steps=0)
    steps(w, clock, [1.0, 1.0, 1.0])
    with w.paused("checkpoint"):
        assert w.phase == "checkpoint" and w.bound_s() is None
        clock.tick(3600)
        assert w.check() is None
    w.checkpointed(3)
    assert w.phase == "step" and w.bound_s() == 10
    clock.tick(9)
    assert w.check() is None
    w.stepped(4)  # 9 s after the save ended, not 3609 s
    assert w.bound_s() == 10 and expired == []
    assert ("checkpoint", None) in report.seen and report.seen[-1] == ("step", 10)


def test_given_a_save_during_warmup_then_warmup_continues_after_it():
    w, clock, _, _ = watchdog(warmup_steps=3)
    w.stepped(1)
    with w.paused("checkpoint"):
        pass
    assert w.phase == "warmup"
    steps(w, clock, [1.0, 1.0], first=2)
    assert w.phase == "step"


def test_given_only_the_newest_window_then_old_step_times_leave_the_median():
    w, clock, _, _ = watchdog(floor_s=1, factor=2, warmup_steps=0, window=4)
    steps(w, clock, [100.0] * 4 + [1.0] * 4)
    assert w.bound_s() == 2


def test_given_a_wait_past_the_bound_then_the_line_names_rank_step_what_seconds_bound_and_checkpoint():
    w, clock, expired, report = watchdog(
        floor_s=300, factor=10, warmup_steps=0, start_step=1200, checkpoint=1200
    )
    steps(w, clock, [4.0] * 33, first=1201)
    w.checkpointed(1232)
    w.doing("step 1234's gradient all-reduce, clipping and optimizer update")
    clock.tick(612)
    expiry = w.check()
    assert expiry is not None and expired == [expiry] and w.phase == "hung"
    assert expiry.line() == (
        "hang: rank 5 waiting for step 1234's gradient all-reduce, clipping and optimizer update "
        "for 612 s, bound 300 s (max of --hang_floor_s 300 and --hang_factor 10 "
        "x 4.0 s, the median of the last 33 steps); last step done 1233; exiting 86 so the job "
        "restarts from the checkpoint of step 1232"
    )
    assert report.seen[-1] == ("hung", None)
    clock.tick(100)
    assert w.check() is None and len(expired) == 1  # once


def test_given_no_checkpoint_yet_then_the_line_says_the_restart_starts_over():
    w, clock, expired, _ = watchdog(floor_s=10, warmup_steps=0)
    clock.tick(11)
    w.check()
    assert (
        expired[0]
        .line()
        .endswith(
            "(--hang_floor_s 10; no step timed yet); last step done 0; exiting 86 so the job restarts "
            "from step 0 (no checkpoint yet)"
        )
    )


def test_given_floor_zero_then_the_phase_is_reported_but_nothing_expires():
    w, clock, expired, report = watchdog(floor_s=0, warmup_steps=0)
    steps(w, clock, [1.0, 1.0])
    clock.tick(10**6)
    assert w.check() is None and expired == [] and report.seen[-1] == ("step", None)
    w.start(0)  # no thread without a bound
    assert w._thread is None


def test_given_the_thread_then_it_fires_at_the_deadline_and_close_stops_it():
    fired = threading.Event()
    got: list[Expiry] = []

    def expired(expiry: Expiry) -> None:
        got.append(expiry)
        fired.set()

    w = StepWatchdog(HangBound(0.3, 1, 0), rank=0, on_expiry=expired)
    w.start(0)
    t0 = time.monotonic()
    w.stepped(1)
    assert fired.wait(10)
    assert 0.3 < time.monotonic() - t0 < 2 and got[0].step == 1 and got[0].waited_s > 0.3
    w.close()

    quiet = StepWatchdog(HangBound(1.0, 1, 0), rank=0, on_expiry=lambda e: pytest.fail("fired"))
    quiet.start(0)
    for step in range(1, 6):  # steps within the bound
        time.sleep(0.1)
        quiet.stepped(step)
    quiet.close()
    assert quiet._thread is None


#: The backstop in the plain mode: past the test's patience, so only exit_hung's own exit can end
#: the process in time (the real 10 s would cover its loss).
PLAIN_BACKSTOP_S = 3600
#: How long the child may take in either mode: a start of Python on a loaded machine, the 0.5 s
#: bound and, in the blocked mode, the 0.5 s backstop; far under PLAIN_BACKSTOP_S.
EXIT_PATIENCE_S = 60

EXIT_SCRIPT = f"""
import logging, sys, threading, time
from training.trainer import watchdog
logging.basicConfig(level=logging.INFO, format="[rank 3] %(levelname)s %(name)s: %(message)s")
watchdog.EXIT_GRACE_S = {PLAIN_BACKSTOP_S}
if sys.argv[1] == "blocked-log":  # writing the line never returns: the timer still ends the process
    watchdog.EXIT_GRACE_S = 0.5
    class Stuck(logging.Handler):
        def emit(self, record):
            threading.Event().wait()
    logging.getLogger().addHandler(Stuck())
w = watchdog.StepWatchdog(watchdog.HangBound(0.5, 10, 0), rank=3)
w.start(7, last_checkpoint=4)
w.doing("step 8's loss all-reduce and report")
threading.Event().wait()  # the main thread blocks for good, as in a collective whose peer is gone
"""


@pytest.mark.parametrize("mode", ["plain", "blocked-log"])
def test_given_a_blocked_main_thread_then_the_process_exits_with_the_hang_code_and_its_line(mode):
    # plain: the backstop is an hour away, so the exit is exit_hung's own os._exit; blocked-log:
    # the line never gets written, so the exit is the 0.5 s backstop's.
    out = subprocess.run(
        [sys.executable, "-c", EXIT_SCRIPT, mode],
        cwd=REPO,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=EXIT_PATIENCE_S,
    )
    assert out.returncode == HANG_EXIT_CODE, out.stderr
    line = "CRITICAL training.trainer.watchdog: hang: rank 3 waiting for step 8's loss all-reduce and report for "
    assert line in out.stderr
    assert "exiting 86 so the job restarts from the checkpoint of step 4" in out.stderr


class Exited(BaseException):
    """What the stand-in for os._exit raises: like the real one, exit_hung does not go on."""


def test_given_an_expiry_then_exit_hung_itself_ends_the_process_and_arms_the_backstop_first(
    monkeypatch, tmp_path
):
    # Given os._exit and the timer recorded (in this process: nothing really exits)
    events: list[tuple[str, object]] = []
    armed: list[threading.Timer] = []

    def fake_exit(code: int) -> None:
        events.append(("exit", code))
        raise Exited

    class Timer(threading.Timer):
        def start(self) -> None:  # recorded, not run: the test checks its settings
            armed.append(self)
            events.append(("backstop", self.interval))

    monkeypatch.setattr(watchdog_module.os, "_exit", fake_exit)
    monkeypatch.setattr(watchdog_module.threading, "Timer", Timer)
    expiry = Expiry(
        rank=2, step=9, waiting_for="the next batch", waited_s=12.0, bound_s=10.0,
        bound=HangBound(10, 3, 0), timed_steps=0, median_s=None, last_checkpoint=8,
    )  # fmt: skip
    # When the watchdog acts on it
    with pytest.raises(Exited):
        exit_hung(expiry, tmp_path)
    # Then the backstop was armed before anything that may block, the process was ended by
    # exit_hung itself with the hang code, and the backstop would end it too, as a daemon
    assert events == [("backstop", watchdog_module.EXIT_GRACE_S), ("exit", HANG_EXIT_CODE)]
    assert watchdog_module.EXIT_GRACE_S == 10.0
    (backstop,) = armed
    assert backstop.daemon and backstop.function is fake_exit and list(backstop.args) == [HANG_EXIT_CODE]


def expiry_of_rank_2() -> Expiry:
    return Expiry(
        rank=2, step=9, waiting_for="step 10's next batch", waited_s=12.0, bound_s=10.0,
        bound=HangBound(10, 3, 0), timed_steps=0, median_s=None, last_checkpoint=8,
    )  # fmt: skip


@pytest.fixture
def exits_recorded(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """os._exit raising Exited (recording its code) and a backstop timer that is never started."""
    codes: list[int] = []

    def fake_exit(code: int) -> None:
        codes.append(code)
        raise Exited

    class Timer(threading.Timer):
        def start(self) -> None:
            pass

    monkeypatch.setattr(watchdog_module.os, "_exit", fake_exit)
    monkeypatch.setattr(watchdog_module.threading, "Timer", Timer)
    return codes


def test_given_an_expiry_then_exit_hung_logs_its_line_and_leaves_the_marker_the_ledger_reads(
    exits_recorded, tmp_path, caplog, monkeypatch
):
    # Given a hung rank 2 on a node (the marker's name and host come from NODE_NAME)
    monkeypatch.setenv("NODE_NAME", "ip-10-0-1-7.ec2.internal")
    caplog.set_level(logging.INFO, logger="training.trainer.watchdog")
    expiry = expiry_of_rank_2()
    # When the watchdog acts on it with the run's directory
    with pytest.raises(Exited):
        exit_hung(expiry, tmp_path)
    # Then the one line logged, as critical, is the expiry's own (rank 0's log, kubectl logs)
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [(logging.CRITICAL, expiry.line())]
    assert exits_recorded == [HANG_EXIT_CODE]
    # And the marker holds the expiry's fields (trainium_job.restarts.write_hang_marker's keys)
    (marker,) = (tmp_path / HANG_MARKERS).iterdir()
    assert marker.name == "ip-10-0-1-7.ec2.internal.rank00002.json"
    fields = json.loads(marker.read_text())
    assert {k: fields[k] for k in ("host", "rank", "step", "waiting_for", "last_checkpoint")} == {
        "host": "ip-10-0-1-7.ec2.internal",
        "rank": 2,
        "step": 9,
        "waiting_for": "step 10's next batch",
        "last_checkpoint": 8,
    }
    # And the restart ledger's reader turns it into a hang of that node, at that step, saying what
    # the rank waited for (drain_hang_markers: the ledger's "step" and "detail")
    (entry,) = drain_hang_markers(tmp_path, by="trainer")
    assert (entry.cause, entry.exit_code, entry.host, entry.step, entry.detail) == (
        "hang", HANG_EXIT_CODE, "ip-10-0-1-7.ec2.internal", 9, "step 10's next batch",
    )  # fmt: skip


def test_given_no_run_dir_or_an_unwritable_one_then_exit_hung_still_exits_and_says_why(
    exits_recorded, tmp_path, caplog
):
    caplog.set_level(logging.INFO, logger="training.trainer.watchdog")
    # Given no run directory: the line, no marker anywhere, the exit
    with pytest.raises(Exited):
        exit_hung(expiry_of_rank_2())
    assert [r.levelno for r in caplog.records] == [logging.CRITICAL] and list(tmp_path.iterdir()) == []
    # Given a run "directory" that is a file: the marker cannot be written, the line says where and
    # why, and the process still ends with the hang code
    caplog.clear()
    blocked = tmp_path / "run"
    blocked.write_text("")
    with pytest.raises(Exited):
        exit_hung(expiry_of_rank_2(), blocked)
    (critical, error) = caplog.records
    assert critical.levelno == logging.CRITICAL and error.levelno == logging.ERROR
    assert error.getMessage().startswith(f"hang marker not written in {blocked}: [Errno ")
    assert error.getMessage().endswith(f"{blocked / HANG_MARKERS}'")  # the OSError's own text
    assert exits_recorded == [HANG_EXIT_CODE, HANG_EXIT_CODE]


def test_given_waits_about_100_s_then_the_line_shows_tenths_below_it_and_whole_seconds_from_it():
    def line(waited_s: float) -> str:
        return Expiry(
            rank=0, step=1, waiting_for="x", waited_s=waited_s, bound_s=300.0,
            bound=HangBound(300, 10, 0), timed_steps=0, median_s=None, last_checkpoint=None,
        ).line()  # fmt: skip

    assert "for 99.9 s, bound 300 s" in line(99.94)
    assert "for 100 s, bound 300 s" in line(100.0)
    assert "for 100 s, bound 300 s" in line(100.4)


def test_given_a_hang_before_the_loop_says_what_it_waits_for_then_the_line_names_the_first_step():
    w, clock, expired, _ = watchdog(floor_s=10, warmup_steps=0)
    clock.tick(11)
    w.check()
    assert expired[0].line().startswith("hang: rank 5 waiting for the first optimizer step for 11.0 s")


def test_given_one_warmup_step_then_the_bound_starts_after_it():
    w, clock, _, _ = watchdog(warmup_steps=1)
    assert w.phase == "warmup"
    steps(w, clock, [1.0])
    assert w.phase == "step"


def test_given_the_deadline_then_the_thread_sleeps_to_it_plus_the_margin_or_idles_without_a_bound():
    w, clock, _, _ = watchdog(floor_s=10, warmup_steps=0)
    clock.tick(4)
    assert w._until_deadline() == pytest.approx(6 + watchdog_module.DEADLINE_MARGIN_S, abs=1e-9)
    clock.tick(20)  # past it: wake at once (the margin only)
    assert w._until_deadline() == pytest.approx(watchdog_module.DEADLINE_MARGIN_S, abs=1e-9)
    with w.paused("checkpoint"):
        assert w._until_deadline() == watchdog_module.IDLE_S


def test_given_the_thread_then_it_is_a_named_daemon_and_keeps_watching_after_a_deadline_without_expiry():
    fired = threading.Event()
    got: list[Expiry] = []

    def expired(expiry: Expiry) -> None:
        got.append(expiry)
        fired.set()

    w = StepWatchdog(HangBound(1.0, 1, 0), rank=0, on_expiry=expired)
    w.start(0)
    # A daemon: a main thread that ends (an exception, no close) is not kept waiting for it; the
    # name is what a thread dump (py-spy dump) and threading.excepthook's message show
    assert w._thread is not None and w._thread.name == "step-watchdog" and w._thread.daemon
    t0 = time.monotonic()
    for step in range(1, 6):  # steps within the bound: the first wake-up (1 s) finds none expired
        time.sleep(0.1)
        w.stepped(step)
    assert fired.wait(10), "the thread stopped watching after a deadline that found no expiry"
    assert got[0].step == 5 and time.monotonic() - t0 > 1.0
    w.close()


def test_given_close_without_a_thread_or_from_the_thread_itself_then_it_returns():
    w, _, _, _ = watchdog(floor_s=0)  # no bound: no thread
    w.close()
    closed = threading.Event()
    errors: list[BaseException] = []

    def close_from_the_thread(expiry: Expiry) -> None:
        try:
            own.close()  # the thread may not join itself
        except BaseException as e:  # noqa: BLE001 - recorded for the main thread to assert on
            errors.append(e)
        closed.set()

    own = StepWatchdog(HangBound(0.2, 1, 0), rank=0, on_expiry=close_from_the_thread)
    own.start(0)
    assert closed.wait(10) and errors == []
    own.close()
    assert own._thread is None


def test_given_the_exit_code_then_no_other_program_of_the_pod_uses_it():
    from training.node.driver_check import MISMATCH_EXIT_CODE
    from training.trainer.stop import STOP_EXIT_CODE

    used = {0, 1, 2, 120, 124, 125, 126, 127, STOP_EXIT_CODE, FABRIC_EXIT_CODE, NOT_MEASURED_EXIT_CODE}
    used |= {MISMATCH_EXIT_CODE, *range(64, 79), *range(128, 193)}  # sysexits(3); 128 + signal
    assert HANG_EXIT_CODE not in used and 0 < HANG_EXIT_CODE < 256


def test_given_a_hang_exit_then_the_volcano_job_restarts_whatever_code_reaches_it():
    # torchrun exits 1 once its restarts are spent, whatever its workers' codes (trainium_job.hang);
    # a policy of the hang code, should a pod ever end with it, must not abort the job either.
    job = policies([*abort_policies(), *RESTART_POLICIES])
    assert action_for_failure(job, 1) == "RestartJob"
    assert action_for_failure(job, HANG_EXIT_CODE) == "RestartJob"


def test_given_the_flags_then_defaults_rules_and_help_match_the_watchdog():
    args = parse_args(["--data_dir", "d"]).hang
    assert (args.hang_floor_s, args.hang_factor, args.hang_warmup_steps, args.collective_timeout_s) == (
        300.0,
        10.0,
        3,
        1800.0,
    )
    actions = {a.dest: a for a in build_parser()._actions}
    assert f"the last {WINDOW} optimizer step times" in str(actions["hang_factor"].help)
    parser = build_parser()
    messages: list[str] = []
    parser.error = messages.append  # type: ignore[method-assign,assignment]
    for argv in (["--hang_factor", "0.5"], ["--hang_floor_s", "-1"], ["--hang_warmup_steps", "-1"]):
        check_args(parser, parser.parse_args(["--data_dir", "d", *argv]))
    check_args(parser, parser.parse_args(["--data_dir", "d", "--collective_timeout_s", "300"]))
    check_args(
        parser, parser.parse_args(["--data_dir", "d", "--hang_floor_s", "0", "--collective_timeout_s", "5"])
    )
    assert messages == ["--hang_floor_s and --hang_warmup_steps must be >= 0, --hang_factor >= 1"] * 3 + [
        "--collective_timeout_s 300 must be above --hang_floor_s 300: a collective would raise before "
        "the watchdog names the hang"
    ]


def phase_states(m: TrainingMetrics) -> dict[str, float]:
    text = generate_latest(m.registry).decode()
    return {
        s.labels["bert_train_phase"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "bert_train_phase"
    }


def test_given_the_metrics_then_the_phase_and_bound_are_exported():
    m = TrainingMetrics()
    assert phase_states(m) == {"warmup": 1, "step": 0, "evaluation": 0, "checkpoint": 0, "hung": 0}
    assert set(phase_states(m)) == set(PHASES)
    m.watchdog("step", 300.0)
    assert samples(m)["bert_train_hang_bound_seconds"] == 300.0 and phase_states(m)["step"] == 1
    m.watchdog("checkpoint", None)
    assert samples(m)["bert_train_hang_bound_seconds"] == 0.0
    assert [p for p, v in phase_states(m).items() if v] == ["checkpoint"]


def test_given_a_collective_timeout_then_the_process_group_and_the_stop_group_get_it(monkeypatch):
    calls: list[tuple[str, object]] = []
    monkeypatch.setattr(device.dist, "is_initialized", lambda: False)
    monkeypatch.setattr(
        device.dist, "init_process_group", lambda *a, **k: calls.append(("init", k["timeout"]))
    )
    monkeypatch.setattr(stop.dist, "new_group", lambda **k: calls.append(("group", k["timeout"])))
    timeout = timedelta(seconds=42)
    device.Backend(0, 0, 2).init_distributed(timeout)
    graceful = stop.GracefulStop()
    try:
        graceful.attach(2, timeout)
    finally:
        graceful.close()
    assert calls == [("init", timeout), ("group", timeout)]


#: How long each evaluation "takes" on the watchdog's clock: far past the 300 s floor.
EVALUATION_S = 3600.0


def test_given_an_evaluation_past_the_step_bound_then_its_phase_is_evaluation_and_nothing_expires(
    shards: SyntheticShards, held_out: SyntheticShards, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # Given a run whose steps are bounded from the first (no warm-up steps; the 300 s floor),
    # evaluating after step 2 and the last, with its metrics endpoint; an expiry is recorded, not
    # acted on (exit_hung would end the test process)
    expired: list[Expiry] = []
    monkeypatch.setattr(pretrain, "exit_hung", lambda expiry, run_dir=None: expired.append(expiry))
    during: list[tuple[str, list[str], Expiry | None]] = []
    watchdogs: list[StepWatchdog] = []
    real_evaluate = pretrain.evaluate

    def evaluate(run: pretrain.Run, reporter: pretrain.StepReporter) -> None:
        w = run.watchdog
        assert w is not None and run.metrics is not None
        watchdogs.append(w)
        # When the evaluation takes an hour: the watchdog's clock moves on by that much (the
        # thread's own wait is real time, 300 s: the test looks with check(), as the thread does)
        clock = w._clock
        w._clock = lambda: clock() + EVALUATION_S
        shown = [p for p, v in phase_states(run.metrics).items() if v]
        during.append((w.phase, shown, w.check()))
        real_evaluate(run, reporter)

    monkeypatch.setattr(pretrain, "evaluate", evaluate)
    extra = ("--max_steps", "4", "--eval_dir", str(held_out.dir), "--eval_every", "2", "--eval_samples", "16")
    args = (*extra, "--hang_warmup_steps", "0", "--metrics_port", str(free_port()))
    pretrain.train(pretrain.parse_args(tiny_args(shards, tmp_path / "run", *args)))
    # Then both evaluations ran in the "evaluation" phase, the metric showed it alone, and the
    # watchdog found no expiry then or after
    assert during == [("evaluation", ["evaluation"], None)] * 2 and expired == []
    # And the steps after an evaluation were timed from its end, not from the step before it
    (w,) = set(watchdogs)
    assert len(w._times) == 4 and max(w._times) < EVALUATION_S
