"""A rank that stops for good (SIGSTOP) in a real 3-process CPU run: the other ranks end themselves
with the hang exit code within the watchdog's bound, saying what they waited for, and the gang,
launched again, resumes from the last checkpoint, having lost only the steps since it.

The ranks are started the way torchrun starts them (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
MASTER_PORT; gloo over env://) but without torchrun, so the test sees each worker's own exit code
(torchrun reports only the first, and exits 1 itself); launching them again is the gang restart
(torchrun's, or Volcano's RestartJob). torchrun's restart after a failed worker is
``test_distributed.py``'s SIGKILL test.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.training.conftest import PYTHON, REPO, child_env, free_port, tiny_args
from training.trainer import checkpoint as ckpt
from trainium_job.hang import HANG_EXIT_CODE

WORLD, STOPPED = 3, 2  # the rank that stops (not rank 0, which writes the step log)
MAX_STEPS, CKPT_EVERY = 12, 4
FLOOR_S = 3.0
#: Past the bound: process exit and a loaded 2-core machine (other tests run beside this one).
SLACK_S = 4.0
TIMEOUT_S = 180
HANG_LINE = re.compile(
    r"\[rank (?P<rank>\d)\] CRITICAL training\.trainer\.watchdog: hang: rank (?P=rank) waiting for "
    r"(?P<what>.+) for (?P<waited>[\d.]+) s, bound (?P<bound>[\d.]+) s \(.*\); last step done "
    rf"(?P<step>\d+); exiting {HANG_EXIT_CODE} so the job restarts from the checkpoint of step (?P<ckpt>\d+)$",
    re.MULTILINE,
)


@dataclass
class Gang:
    out: Path
    procs: list[subprocess.Popen]
    logs: list[Path]
    metrics_port: int

    def kill_all(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()

    def log(self, rank: int) -> str:
        return self.logs[rank].read_text()

    def tail(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in self.logs)

    def records(self) -> list[dict]:
        path = self.out / "train_log.jsonl"
        return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []

    def metrics(self) -> dict[tuple[str, str], float]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=2) as r:
            text = r.read().decode()
        return {
            (s.name, s.labels.get("bert_train_phase", "")): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }


def launch(shards, out: Path, attempt: int, *, world: int = WORLD, extra: tuple[str, ...] = ()) -> Gang:
    """The gang: ``world`` ranks of one node, as torchrun would set them up."""
    port, metrics_port = free_port(), free_port()
    args = tiny_args(
        shards,
        out,
        *("--max_steps", str(MAX_STEPS), "--checkpoint_every", str(CKPT_EVERY), "--keep_checkpoints", "2"),
        *("--hang_floor_s", str(FLOOR_S), "--hang_factor", "2", "--hang_warmup_steps", "2"),
        *("--collective_timeout_s", "60", "--metrics_port", str(metrics_port)),
        *extra,
    )
    out.mkdir(parents=True, exist_ok=True)
    procs, logs = [], []
    for rank in range(world):
        env = child_env(
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            WORLD_SIZE=str(world),
            LOCAL_WORLD_SIZE=str(world),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
        )
        log = out.parent / f"{out.name}-attempt{attempt}-rank{rank}.log"
        with open(log, "wb") as sink:
            procs.append(
                subprocess.Popen(
                    [PYTHON, "-m", "training.trainer.pretrain", *args],
                    cwd=REPO,
                    env=env,
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        logs.append(log)
    return Gang(out, procs, logs, metrics_port)


def test_given_a_rank_stopped_after_a_checkpoint_then_the_others_exit_86_in_the_bound_and_a_relaunch_resumes(
    shards, tmp_path
):
    started = time.monotonic()
    out = tmp_path / "hang"
    gang = launch(shards, out, attempt=0)
    try:
        deadline = time.monotonic() + TIMEOUT_S
        # Past a checkpoint, and not in a save (where the watchdog sets no bound): a step after it.
        while True:
            assert time.monotonic() < deadline and all(p.poll() is None for p in gang.procs), gang.tail()
            newest = ckpt.newest_complete(out / "checkpoints")
            records = gang.records()
            if newest is not None and records and records[-1]["step"] > int(newest.name.split("_")[1]):
                break
            time.sleep(0.02)
        os.kill(gang.procs[STOPPED].pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        # What rank 0's metrics say while it waits: in the bounded phase, and which bound.
        during = gang.metrics()
        exited: dict[int, float] = {}
        while len(exited) < WORLD - 1 and time.monotonic() < stopped_at + FLOOR_S * 10:
            for rank, p in enumerate(gang.procs):
                if rank != STOPPED and rank not in exited and p.poll() is not None:
                    exited[rank] = time.monotonic() - stopped_at
            time.sleep(0.02)
        codes = [p.poll() for p in gang.procs]
        # The stopped rank is still there: the others did not wait for it to go.
        assert codes[STOPPED] is None, gang.tail()
        os.killpg(gang.procs[STOPPED].pid, signal.SIGKILL)  # what the restart does to it
        gang.procs[STOPPED].wait()
    except BaseException:
        gang.kill_all()
        raise

    assert [c for r, c in enumerate(codes) if r != STOPPED] == [HANG_EXIT_CODE] * (WORLD - 1), gang.tail()
    lines: dict[int, re.Match[str]] = {}
    for rank in range(WORLD):
        if rank != STOPPED:
            found = HANG_LINE.search(gang.log(rank))
            assert found is not None, gang.tail()
            lines[rank] = found
    for rank, m in lines.items():
        bound, waited = float(m["bound"]), float(m["waited"])
        assert bound >= FLOOR_S and waited >= bound
        assert bound - 1.0 <= exited[rank] <= bound + SLACK_S, (rank, exited, m.group(0))
        # A collective the stopped rank never joins: DDP's (forward or backward), the loss's, the stop agreement's.
        assert re.search(r"all-reduce|broadcast", m["what"]), m["what"]
    (last_step,) = {int(m["step"]) for m in lines.values()}
    assert during[("bert_train_phase", "step")] == 1 and during[("bert_train_phase", "hung")] == 0
    assert during[("bert_train_hang_bound_seconds", "")] == float(lines[0]["bound"])
    assert during[("bert_train_step", "")] == last_step

    first = [r["step"] for r in gang.records()]
    assert first == list(range(1, last_step + 1))
    newest = ckpt.newest_complete(out / "checkpoints")
    assert newest is not None
    checkpoint = int(newest.name.split("_")[1])
    assert {int(m["ckpt"]) for m in lines.values()} == {checkpoint} and checkpoint % CKPT_EVERY == 0
    lost = last_step - checkpoint
    assert 0 <= lost < CKPT_EVERY

    # The gang again: it resumes from that checkpoint and redoes exactly the steps lost.
    rerun = launch(shards, out, attempt=1)
    try:
        codes = [p.wait(timeout=TIMEOUT_S) for p in rerun.procs]
    except BaseException:
        rerun.kill_all()
        raise
    assert codes == [0] * WORLD, rerun.tail()
    assert f"resumed from {newest} at step {checkpoint}" in rerun.log(0)
    second = [r["step"] for r in rerun.records()][len(first) :]
    assert second == list(range(checkpoint + 1, MAX_STEPS + 1))
    redone = [s for s in second if s <= last_step]
    assert len(redone) == lost
    assert json.loads((out / "metrics.json").read_text())["end_step"] == MAX_STEPS
    print(
        f"\nhang test: stopped after step {last_step}, checkpoint {checkpoint}, {lost} steps redone; "
        f"exits {sorted(exited.values())} s after SIGSTOP; whole test {time.monotonic() - started:.1f} s"
    )


def test_given_no_watchdog_and_a_stopped_peer_then_the_collective_timeout_ends_the_wait(shards, tmp_path):
    # --collective_timeout_s reaches gloo: with the watchdog off, a collective that waits for the
    # stopped rank raises after it (in the watchdog's phases without a bound, this is the ceiling).
    timeout_s = 3
    gang = launch(
        shards,
        tmp_path / "timeout",
        attempt=0,
        world=2,
        extra=("--hang_floor_s", "0", "--collective_timeout_s", str(timeout_s)),
    )
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while not gang.records() or gang.records()[-1]["step"] < 3:
            assert time.monotonic() < deadline and all(p.poll() is None for p in gang.procs), gang.tail()
            time.sleep(0.02)
        os.kill(gang.procs[1].pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        code = gang.procs[0].wait(timeout=timeout_s * 10)
        waited = time.monotonic() - stopped_at
    finally:
        gang.kill_all()
    assert code == 1, gang.tail()  # the collective's error, uncaught: torchrun restarts the group
    assert timeout_s - 1 <= waited <= timeout_s + SLACK_S, waited
    assert f"Timed out waiting {timeout_s * 1000}ms" in gang.log(0)
    assert "hang:" not in gang.log(0)
