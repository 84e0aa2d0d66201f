"""The ranks' agreements over the stop's CPU group (``GracefulStop``), across two real processes."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import torch.distributed as dist
import torch.multiprocessing as mp

from training.trainer.stop import GracefulStop


def _rank(rank: int, store: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    stop = GracefulStop()
    try:
        stop.attach(2, timedelta(seconds=60))
        # What each rank sees of a set on the shared file system: only rank 0 sees it yet, then both
        seen = [stop.every_rank(rank == 0), stop.every_rank(True), stop.every_rank(False)]
        Path(out, f"{rank}.json").write_text(json.dumps(seen))
    finally:
        stop.close()
        dist.destroy_process_group()


def test_given_two_ranks_when_one_sees_a_file_then_every_rank_is_told_not_yet(tmp_path):
    mp.spawn(_rank, args=(str(tmp_path / "store"), str(tmp_path)), nprocs=2, join=True)
    # Then both decide alike: not until every rank sees it
    for rank in (0, 1):
        assert json.loads((tmp_path / f"{rank}.json").read_text()) == [False, True, False]


def test_given_one_process_then_its_own_view_is_the_agreement():
    stop = GracefulStop()
    try:
        stop.attach(1)
        assert (stop.every_rank(True), stop.every_rank(False)) == (True, False)
    finally:
        stop.close()
