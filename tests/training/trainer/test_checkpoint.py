"""Atomic checkpoints: crash during a save, newest-complete detection, keep-last-K, per-rank files."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import re
import signal
import subprocess
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.training.conftest import PYTHON, REPO, child_env
from training.trainer import checkpoint as ckpt


def save(
    root: Path, step: int, keep: int = 3, comm: ckpt.Comm | None = None, value: float | None = None
) -> Path:
    value = float(step) if value is None else value
    return ckpt.save_checkpoint(
        root,
        step,
        comm or ckpt.Comm(),
        rank_state={"data_position": [0, step, 8], "rng": ckpt.capture_rng_state()},
        global_state=lambda: {"model": {"w": torch.full((4,), value)}, "step": step},
        keep=keep,
    )


def on_two_ranks(run) -> None:
    """``run(rank)`` for ranks 0 and 1 at once (threads: the save's barrier needs both)."""
    threads = [threading.Thread(target=run, args=(r,)) for r in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def test_given_saves_then_only_last_k_kept_and_newest_loadable(tmp_path):
    for step in range(1, 6):
        save(tmp_path, step * 10, keep=2)
    assert [s for s, _ in ckpt.complete_checkpoints(tmp_path)] == [40, 50]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_00000040", "step_00000050"]
    loaded = ckpt.load_checkpoint(ckpt.newest_complete(tmp_path), rank=0, world_size=1)
    assert loaded.step == 50 and loaded.state["model"]["w"].tolist() == [50.0] * 4
    assert loaded.rank_state["data_position"] == [0, 50, 8]


def test_given_leftovers_of_crashes_then_ignored_by_newest_complete_and_pruned(tmp_path):
    save(tmp_path, 5)
    (tmp_path / ".step_00000009.partial").mkdir()  # crash before the rename
    (tmp_path / ".step_00000009.partial" / "state.pt").write_bytes(b"torn")
    no_meta = tmp_path / "step_00000007"  # not made by us: no meta.json
    no_meta.mkdir()
    missing_rank = tmp_path / "step_00000008"
    missing_rank.mkdir()
    (missing_rank / "meta.json").write_text('{"step": 8, "world_size": 2}')
    (missing_rank / "state.pt").write_bytes(b"x")
    (missing_rank / "rank_00000.pt").write_bytes(b"x")  # rank 1 never wrote
    assert ckpt.newest_complete(tmp_path).name == "step_00000005"
    save(tmp_path, 10)  # a later save removes the stale partial it supersedes
    assert not (tmp_path / ".step_00000009.partial").exists()
    with pytest.raises(ckpt.CheckpointError, match=r"step_00000008/rank_00001.pt: missing"):
        ckpt.load_checkpoint(missing_rank, 0, 2)


def test_given_same_step_saved_again_then_replaced(tmp_path):
    save(tmp_path, 3, value=1.0)
    save(tmp_path, 3, value=2.0)
    loaded = ckpt.load_checkpoint(tmp_path / "step_00000003", 0, 1)
    assert loaded.state["model"]["w"][0].item() == 2.0
    assert [p.name for p in tmp_path.iterdir()] == ["step_00000003"]


def test_given_two_ranks_then_each_writes_its_file_and_world_change_drops_rank_state(tmp_path):
    barrier = threading.Barrier(2, timeout=30)
    errors = []

    def run(rank):
        try:
            ckpt.save_checkpoint(
                tmp_path,
                4,
                ckpt.Comm(rank, 2, barrier.wait),
                rank_state={"data_position": [1, rank, 16], "rng": ckpt.capture_rng_state()},
                global_state=lambda: {"model": {}, "step": 4},
                keep=1,
            )
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    on_two_ranks(run)
    assert not errors
    path = tmp_path / "step_00000004"
    assert sorted(p.name for p in path.iterdir()) == [
        "meta.json",
        "rank_00000.pt",
        "rank_00001.pt",
        "state.pt",
    ]
    assert ckpt.load_checkpoint(path, 1, 2).rank_state["data_position"] == [1, 1, 16]
    assert ckpt.load_checkpoint(path, 0, 4).rank_state is None  # other world size


def test_given_rng_state_then_restored_exactly():
    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    state = ckpt.capture_rng_state(device_state="dev")
    expected = (random.random(), np.random.rand(), torch.rand(1).item())
    random.seed(2), np.random.seed(2), torch.manual_seed(2)
    assert ckpt.restore_rng_state(state) == "dev"
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected


def test_given_error_while_writing_then_old_file_intact_and_no_temp_left(tmp_path):
    target = tmp_path / "f.json"
    ckpt.write_json_durably(target, {"v": 1})

    def failing(f):
        f.write(b"partial")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        ckpt.write_file_durably(target, failing)
    assert target.read_text().replace(" ", "").replace("\n", "") == '{"v":1}'
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]


SAVER = textwrap.dedent(
    """
    import sys, torch
    from pathlib import Path
    from training.trainer import checkpoint as ckpt
    root = Path(sys.argv[1])
    big = torch.zeros(60_000_000)  # 240 MB: a save takes long enough to be killed mid-write
    step = 0
    while True:
        step += 1
        big[0] = step
        ckpt.save_checkpoint(root, step, ckpt.Comm(),
                             rank_state={"data_position": [0, 0, step], "rng": ckpt.capture_rng_state()},
                             global_state=lambda: {"model": {"big": big}, "step": step}, keep=2)
    """
)


def test_given_sigkill_during_save_then_previous_checkpoint_is_newest_complete_and_loads(tmp_path):
    proc = subprocess.Popen([PYTHON, "-c", SAVER, str(tmp_path)], cwd=REPO, env=child_env())
    try:
        deadline = time.monotonic() + 120
        victim = None
        while victim is None:
            assert proc.poll() is None, "saver died on its own"
            assert time.monotonic() < deadline, "no save in progress seen"
            done = ckpt.complete_checkpoints(tmp_path)
            for partial in tmp_path.glob(".step_*.partial"):
                temp = [p for p in partial.glob(".state.pt.tmp-*") if p.stat().st_size > 1_000_000]
                if done and temp:
                    victim = partial
            time.sleep(0.002)
        os.kill(proc.pid, signal.SIGKILL)  # mid-write of the big state file
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    killed_step = int(victim.name.split("_")[1].split(".")[0])
    assert victim.exists() and not ckpt.is_complete(victim)
    newest = ckpt.newest_complete(tmp_path)
    assert newest is not None and int(newest.name.split("_")[1]) == killed_step - 1
    loaded = ckpt.load_checkpoint(newest, 0, 1)
    assert loaded.step == killed_step - 1
    assert loaded.state["model"]["big"][0].item() == killed_step - 1
    assert loaded.state["model"]["big"].numel() == 60_000_000


# --- integrity: digests, fallback, safe pruning ---------------------------------------------


def flip_bytes(file: Path, count: int = 64) -> None:
    """Invert ``count`` bytes in the middle of ``file``; its size stays the same."""
    data = bytearray(file.read_bytes())
    mid = len(data) // 2
    for i in range(mid, mid + count):
        data[i] ^= 0xFF
    file.write_bytes(bytes(data))


def truncate(file: Path, keep: float = 0.5) -> None:
    file.write_bytes(file.read_bytes()[: int(file.stat().st_size * keep)])


DAMAGE = {
    "flipped state": (lambda d: flip_bytes(d / "state.pt"), r"state.pt: sha256 \w+ does not match"),
    "truncated state": (lambda d: truncate(d / "state.pt"), r"state.pt: \d+ bytes, meta.json recorded \d+"),
    "empty state": (lambda d: (d / "state.pt").write_bytes(b""), r"state.pt: 0 bytes, meta.json recorded"),
    "truncated rank file": (lambda d: truncate(d / "rank_00001.pt"), r"rank_00001.pt: \d+ bytes"),
    "missing rank file": (lambda d: (d / "rank_00001.pt").unlink(), r"rank_00001.pt: missing"),
    "empty meta": (lambda d: (d / "meta.json").write_text(""), r"meta.json: unreadable"),
}


def save2(root: Path, step: int, keep: int = 3) -> Path:
    """A checkpoint of two ranks (threads), as a two-process job writes it."""
    barrier = threading.Barrier(2, timeout=30)
    errors = []

    def run(rank):
        try:
            ckpt.save_checkpoint(
                root,
                step,
                ckpt.Comm(rank, 2, barrier.wait),
                rank_state={"data_position": [0, rank, step], "rng": ckpt.capture_rng_state()},
                global_state=lambda: {"model": {"w": torch.full((1000,), float(step))}, "step": step},
                keep=keep,
                meta=lambda: {"loss": 1.0 / step},
            )
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    on_two_ranks(run)
    assert not errors, errors
    return root / ckpt.step_dir_name(step)


def test_given_a_save_then_meta_records_size_and_sha256_of_every_file(tmp_path):
    path = save2(tmp_path, 5)
    meta = json.loads((path / "meta.json").read_text())
    assert meta["step"] == 5 and meta["world_size"] == 2 and meta["loss"] == 0.2
    assert sorted(meta["files"]) == ["rank_00000.pt", "rank_00001.pt", "state.pt"]
    for name, rec in meta["files"].items():
        data = (path / name).read_bytes()
        assert rec == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert sorted(p.name for p in path.iterdir()) == [
        "meta.json",
        "rank_00000.pt",
        "rank_00001.pt",
        "state.pt",
    ]


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_given_damaged_newest_checkpoint_then_skipped_with_one_line_and_older_one_loads(
    tmp_path, caplog, damage
):
    for step in (10, 20, 30):
        save2(tmp_path, step)
    do, message = DAMAGE[damage]
    do(tmp_path / "step_00000030")
    caplog.set_level(logging.WARNING, logger="training.trainer.checkpoint")

    remaining, meta = ckpt.first_verified(ckpt.resume_candidates(tmp_path, "auto"))

    assert meta["step"] == 20 and [p.name for p in remaining] == ["step_00000020", "step_00000010"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "\n" not in warnings[0], warnings
    assert warnings[0].startswith("checkpoint step_00000030 skipped: ") and re.search(message, warnings[0])
    loaded = ckpt.load_first_usable(remaining, rank=1, world_size=2)
    assert loaded.step == 20 and loaded.rank_state["data_position"] == [0, 1, 20]
    # Nothing was deleted: the damaged one stays for the save of its step to replace.
    assert [s for s, _ in ckpt.step_dirs(tmp_path)] == [10, 20, 30]
    save2(tmp_path, 30)
    assert ckpt.verify(tmp_path / "step_00000030")["step"] == 30


def test_given_every_checkpoint_damaged_then_error_names_the_newest_and_nothing_deleted(tmp_path):
    for step in (1, 2):
        save2(tmp_path, step)
        flip_bytes(tmp_path / ckpt.step_dir_name(step) / "rank_00000.pt", 8)
    with pytest.raises(ckpt.CheckpointError) as e:
        ckpt.first_verified(ckpt.resume_candidates(tmp_path, "auto"))
    assert str(e.value).startswith("none of the 2 checkpoints is usable (newest: ")
    assert "step_00000002/rank_00000.pt: sha256" in str(e.value) and "\n" not in str(e.value)
    assert [s for s, _ in ckpt.step_dirs(tmp_path)] == [1, 2]
    assert ckpt.first_verified([]) == ([], None)  # no checkpoint at all: a fresh start


def test_given_checkpoint_without_digests_that_cannot_be_unpickled_then_load_falls_back(tmp_path, caplog):
    for step in (1, 2):
        save(tmp_path, step)
    newest = tmp_path / "step_00000002"
    meta = json.loads((newest / "meta.json").read_text())
    del meta["files"]  # as written before digests were recorded
    (newest / "meta.json").write_text(json.dumps(meta))
    truncate(newest / "state.pt")
    remaining, _ = ckpt.first_verified(ckpt.resume_candidates(tmp_path, "auto"))
    assert remaining[0] == newest  # without digests only loading can tell
    caplog.set_level(logging.WARNING, logger="training.trainer.checkpoint")
    loaded = ckpt.load_first_usable(remaining, 0, 1)
    assert loaded.step == 1
    [warning] = [r.getMessage() for r in caplog.records]
    assert re.match(
        r"checkpoint step_00000002 skipped: .*step_00000002/state.pt: cannot be loaded \(\w+", warning
    )


def test_given_new_checkpoint_damaged_before_read_back_then_nothing_pruned(tmp_path, monkeypatch, caplog):
    for step in (10, 20):
        save(tmp_path, step, keep=2)
    commit = ckpt._commit

    def commit_then_damage(partial, final):  # the storage corrupts the file after the write
        commit(partial, final)
        flip_bytes(final / "state.pt", 16)

    monkeypatch.setattr(ckpt, "_commit", commit_then_damage)
    caplog.set_level(logging.ERROR, logger="training.trainer.checkpoint")
    save(tmp_path, 30, keep=2)
    assert [s for s, _ in ckpt.step_dirs(tmp_path)] == [10, 20, 30]  # the good ones are kept
    assert "checkpoint" in caplog.text and "failed verification after writing, nothing pruned" in caplog.text
    monkeypatch.setattr(ckpt, "_commit", commit)
    save(tmp_path, 40, keep=2)  # verified: now the older ones may go
    assert [s for s, _ in ckpt.step_dirs(tmp_path)] == [30, 40]


def test_given_resume_ckpt_path_then_newer_ones_of_output_dir_first_then_it(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    save(src, 3)
    for step in (2, 5):
        save(out, step)
    assert ckpt.resume_candidates(out, str(src / "step_00000003")) == [
        out / "step_00000005",
        src / "step_00000003",
    ]
    with pytest.raises(ckpt.CheckpointError, match=r"--resume_ckpt .*nowhere: no such checkpoint directory"):
        ckpt.resume_candidates(out, str(tmp_path / "nowhere"))


def test_given_large_chunks_hashed_on_a_thread_then_digest_is_the_files(tmp_path):
    state = {"big": torch.arange(3_000_000, dtype=torch.float32), "small": torch.ones(3)}  # 12 MB chunk
    digest = ckpt.write_file_durably(tmp_path / "s.pt", lambda f: torch.save(state, f))
    data = (tmp_path / "s.pt").read_bytes()
    assert (
        digest
        == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        == ckpt.file_digest(tmp_path / "s.pt")
    )
    assert torch.equal(torch.load(tmp_path / "s.pt")["big"], state["big"])
