"""Atomic, resumable checkpoints: one directory per optimizer step.

Layout under ``<output_dir>/checkpoints``::

    step_00000200/
        state.pt          model, optimizer, scheduler, step (rank 0 writes it)
        rank_00000.pt     per-rank: RNG states (python, numpy, torch, device), data position
        rank_00001.pt     ...
        meta.json         step, world size, file list

Why a directory: RNG states and data positions differ per rank, and each rank writing its
own small file needs no object collectives (which the XLA process group may not offer).
Commit protocol (every file: write, flush, fsync):

1. rank 0 creates ``.step_00000200.partial/`` next to the final name; barrier;
2. every rank writes its ``rank_*.pt``; rank 0 writes ``state.pt`` and ``meta.json``;
3. barrier; rank 0 fsyncs the directory, ``os.replace``-s it to ``step_00000200`` and fsyncs
   ``checkpoints/``. Only a directory under its final name counts, so a crash at any point
   leaves the previous checkpoint as the newest complete one.

``output_dir`` must be one file system shared by all nodes (FSx for Lustre on EKS).
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import torch

log = logging.getLogger(__name__)

_STEP_RE = re.compile(r"^step_(\d{8})$")
STATE_FILE = "state.pt"
META_FILE = "meta.json"


def rank_file(rank: int) -> str:
    return f"rank_{rank:05d}.pt"


def step_dir_name(step: int) -> str:
    return f"step_{step:08d}"


def checkpoint_root(output_dir: str | os.PathLike) -> Path:
    return Path(output_dir) / "checkpoints"


def fsync_dir(path: Path) -> None:
    """Make a rename/create inside ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file_durably(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """Write ``path`` via a temp file in the same directory, fsync, then os.replace."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def write_json_durably(path: Path, obj: Any) -> None:
    write_file_durably(path, lambda f: f.write(json.dumps(obj, indent=2, sort_keys=True).encode()))


def is_complete(path: Path) -> bool:
    """A step directory under its final name with its meta, state and every rank file."""
    if not _STEP_RE.match(path.name) or not path.is_dir():
        return False
    try:
        meta = json.loads((path / META_FILE).read_text())
        files = [STATE_FILE, *(rank_file(r) for r in range(int(meta["world_size"])))]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return all((path / name).is_file() for name in files)


def complete_checkpoints(root: Path) -> list[tuple[int, Path]]:
    """(step, path) of every complete checkpoint under ``root``, oldest first."""
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        m = _STEP_RE.match(p.name)
        if m and is_complete(p):
            found.append((int(m.group(1)), p))
    return sorted(found)


def newest_complete(root: Path) -> Path | None:
    found = complete_checkpoints(root)
    return found[-1][1] if found else None


def capture_rng_state(device_state: Any = None) -> dict[str, Any]:
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "device": device_state,
    }


def restore_rng_state(state: dict[str, Any]) -> Any:
    """Restore host RNGs; return the device part for the device layer to restore."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    return state.get("device")


def to_cpu(obj: Any) -> Any:
    """Copy every tensor in a nested structure to CPU (so a checkpoint loads anywhere)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(to_cpu(v) for v in obj)
    return obj


@dataclass
class Comm:
    """What saving needs from the process group."""

    rank: int = 0
    world_size: int = 1
    barrier: Callable[[], None] = lambda: None


def save_checkpoint(
    root: Path,
    step: int,
    comm: Comm,
    *,
    rank_state: dict[str, Any],
    global_state: Callable[[], dict[str, Any]],
    keep: int,
) -> Path:
    """Collective: every rank calls it. ``global_state`` is only evaluated on rank 0."""
    if keep < 1:
        raise ValueError("keep: must be >= 1")
    final = root / step_dir_name(step)
    partial = root / f".{final.name}.partial"
    if comm.rank == 0:
        root.mkdir(parents=True, exist_ok=True)
        if partial.exists():  # left by a crash during an earlier save of this step
            shutil.rmtree(partial)
        partial.mkdir()
    comm.barrier()
    write_file_durably(partial / rank_file(comm.rank), lambda f: torch.save(to_cpu(rank_state), f))
    if comm.rank == 0:
        state = to_cpu(global_state())
        write_file_durably(partial / STATE_FILE, lambda f: torch.save(state, f))
        write_json_durably(partial / META_FILE, {"step": step, "world_size": comm.world_size})
    comm.barrier()
    if comm.rank == 0:
        fsync_dir(partial)
        _commit(partial, final)
        prune(root, keep)
    return final


def _commit(partial: Path, final: Path) -> None:
    old = None
    if final.exists():  # same step saved again (e.g. after resuming from an older one)
        old = final.with_name(f".{final.name}.old")
        if old.exists():
            shutil.rmtree(old)
        os.replace(final, old)
    os.replace(partial, final)
    fsync_dir(final.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def prune(root: Path, keep: int) -> None:
    """Delete all but the newest ``keep`` complete checkpoints, and stale partial dirs."""
    found = complete_checkpoints(root)
    for _, path in found[:-keep]:
        shutil.rmtree(path, ignore_errors=True)
    newest = found[-1][0] if found else -1
    for p in root.iterdir():
        m = re.match(r"^\.step_(\d{8})\.(partial|old)$", p.name)
        if m and int(m.group(1)) <= newest:
            shutil.rmtree(p, ignore_errors=True)


@dataclass
class Loaded:
    path: Path
    step: int
    world_size: int
    state: dict[str, Any]
    rank_state: dict[str, Any] | None  # None when the world size changed


def load_checkpoint(path: Path, rank: int, world_size: int) -> Loaded:
    """Read a complete checkpoint to CPU; the rank part only if the world size matches."""
    if not is_complete(path):
        raise FileNotFoundError(f"{path} is not a complete checkpoint")
    meta = json.loads((path / META_FILE).read_text())
    # weights_only=False: the files hold RNG states (tuples, numpy arrays) we wrote ourselves.
    state = torch.load(path / STATE_FILE, map_location="cpu", weights_only=False)
    rank_state = None
    if int(meta["world_size"]) == world_size:
        rank_state = torch.load(path / rank_file(rank), map_location="cpu", weights_only=False)
    else:
        log.warning(
            "checkpoint %s was written by %s ranks, this run has %s: data positions and RNG "
            "states cannot be mapped; each rank starts its data stream at a fresh epoch",
            path, meta["world_size"], world_size,
        )  # fmt: skip
    return Loaded(path, int(meta["step"]), int(meta["world_size"]), state, rank_state)
