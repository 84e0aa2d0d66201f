"""The step watchdog's bound, phases and exit, on a fake clock; its exit in a real process."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from datetime import timedelta

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.contracts.volcano import action_for_failure, policies
from tests.training.conftest import REPO, child_env
from tests.training.trainer.test_prom_metrics import samples
from training.trainer import device, stop
from training.trainer import watchdog as watchdog_module
from training.trainer.cli import build_parser, check_args, parse_args
from training.trainer.prom_metrics import TrainingMetrics
from training.trainer.watchdog import WINDOW, Expiry, HangBound, StepWatchdog, exit_hung
from trainium_job.fabric_check import EXIT_CODE as FABRIC_EXIT_CODE
from trainium_job.fabric_check import NOT_MEASURED_EXIT_CODE
from trainium_job.hang import HANG_EXIT_CODE, PHASES
from trainium_job.pod import ABORT_POLICY, RESTART_POLICIES


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


def test_given_the_exit_code_then_no_other_program_of_the_pod_uses_it():
    from training.node.driver_check import MISMATCH_EXIT_CODE
    from training.trainer.stop import STOP_EXIT_CODE

    used = {0, 1, 2, 120, 124, 125, 126, 127, STOP_EXIT_CODE, FABRIC_EXIT_CODE, NOT_MEASURED_EXIT_CODE}
    used |= {MISMATCH_EXIT_CODE, *range(64, 79), *range(128, 193)}  # sysexits(3); 128 + signal
    assert HANG_EXIT_CODE not in used and 0 < HANG_EXIT_CODE < 256


def test_given_a_hang_exit_then_the_volcano_job_restarts_whatever_code_reaches_it():
    # torchrun exits 1 once its restarts are spent, whatever its workers' codes (trainium_job.hang);
    # a policy of the hang code, should a pod ever end with it, must not abort the job either.
    job = policies([ABORT_POLICY, *RESTART_POLICIES])
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
    assert phase_states(m) == {"warmup": 1, "step": 0, "checkpoint": 0, "hung": 0}
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
