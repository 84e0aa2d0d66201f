"""Atomic, resumable checkpoints: one directory per optimizer step.

Layout under ``<output_dir>/checkpoints``::

    step_00000200/
        state.pt          model, optimizer, scheduler, step (rank 0 writes it)
        rank_00000.pt     per-rank: RNG states (python, numpy, torch, device), data position
        rank_00001.pt     ...
        meta.json         step, world size, size and SHA-256 of every file above

Integrity: every file is hashed as it is written (the bytes pass through the hash on their way
to the file, so saving reads nothing back) and ``meta.json`` records the digests. Loading
verifies them; a checkpoint that fails is skipped for the next older one (``resume_candidates``).
Pruning runs only once the new checkpoint has been read back and verified, and never deletes the
newest verified checkpoint. SHA-256, not CRC32: hashlib's uses the CPU's SHA extensions here
(~2 GB/s, BENCHMARKS.md), and a 256-bit digest leaves no doubt about a match.

Why a directory: RNG states and data positions differ per rank, and each rank writing its
own small file needs no object collectives (which the XLA process group may not offer).
Commit protocol (every file: write, flush, fsync):

1. rank 0 creates ``.step_00000200.partial/`` next to the final name; barrier;
2. every rank writes its ``rank_*.pt`` and a digest side file; rank 0 writes ``state.pt``;
3. barrier; rank 0 folds the side files into ``meta.json``, fsyncs the directory,
   ``os.replace``-s it to ``step_00000200`` and fsyncs ``checkpoints/``. Only a directory
   under its final name counts, so a crash at any point leaves the previous checkpoint as the
   newest complete one.

``output_dir`` must be one file system shared by all nodes (FSx for Lustre on EKS).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import re
import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import numpy as np
import torch

T = TypeVar("T")
log = logging.getLogger(__name__)

_STEP_RE = re.compile(r"^step_(\d{8})$")
STATE_FILE = "state.pt"
META_FILE = "meta.json"
DIGEST = "sha256"
_READ_CHUNK = 16 * 2**20


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used; the message is one line naming the file."""


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


class _HashingWriter:
    """A write-only file that hashes what passes through it (torch.save writes sequentially).

    A large chunk is hashed on a second thread while this one writes it (both release the GIL),
    so a save costs max(write, hash) rather than the sum; the chunk's buffer stays valid because
    ``write`` returns only when both are done.
    """

    _OVERLAP_BYTES = 1 << 20

    def __init__(self, f: BinaryIO, pool: ThreadPoolExecutor) -> None:
        self._f = f
        self._pool = pool
        self.hash = hashlib.new(DIGEST)
        self.size = 0

    def write(self, data: bytes) -> int:
        self.size += len(data)
        if len(data) < self._OVERLAP_BYTES:
            self.hash.update(data)
            return self._f.write(data)
        hashed = self._pool.submit(self.hash.update, data)
        try:
            return self._f.write(data)
        finally:
            hashed.result()

    def flush(self) -> None:
        self._f.flush()


def write_file_durably(path: Path, write: Callable[[BinaryIO], object]) -> dict[str, Any]:
    """Write ``path`` via a temp file in the same directory, fsync, then os.replace.

    Returns ``{"bytes": size, "sha256": hex digest}`` of what was written.
    """
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f, ThreadPoolExecutor(1, thread_name_prefix="ckpt-hash") as pool:
            hashed = _HashingWriter(f, pool)
            write(hashed)  # type: ignore[arg-type]
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return {"bytes": hashed.size, DIGEST: hashed.hash.hexdigest()}


def file_digest(path: Path) -> dict[str, Any]:
    """``{"bytes", "sha256"}`` of a file as stored."""
    h = hashlib.new(DIGEST)
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(_READ_CHUNK):
            h.update(chunk)
            size += len(chunk)
    return {"bytes": size, DIGEST: h.hexdigest()}


def write_json_durably(path: Path, obj: Any) -> None:
    write_file_durably(path, lambda f: f.write(json.dumps(obj, indent=2, sort_keys=True).encode()))


def read_meta(path: Path) -> dict[str, Any]:
    """A checkpoint's ``meta.json``; CheckpointError naming it when unreadable."""
    try:
        meta = json.loads((path / META_FILE).read_text())
        int(meta["step"]), int(meta["world_size"])
    except FileNotFoundError:
        raise CheckpointError(f"{path / META_FILE}: missing; the save did not finish") from None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"{path / META_FILE}: unreadable ({type(e).__name__}: {e})") from None
    return meta


def verify(path: Path) -> dict[str, Any]:
    """Check every file of a checkpoint against the sizes and digests in its meta.json.

    Returns the meta. Raises CheckpointError (one line, naming the file) on the first problem.
    A checkpoint written before digests were recorded (no ``files`` in meta) is checked for
    its files only; loading it is then its only test.
    """
    meta = read_meta(path)
    expected = [STATE_FILE, *(rank_file(r) for r in range(int(meta["world_size"])))]
    recorded = meta.get("files")
    for name in expected:
        file = path / name
        if not file.is_file():
            raise CheckpointError(
                f"{file}: missing (meta.json says {meta['world_size']} ranks wrote this checkpoint)"
            )
        if recorded is None:
            continue
        want = recorded.get(name)
        if want is None:
            raise CheckpointError(f"{file}: no digest in meta.json")
        size = file.stat().st_size
        if size != want["bytes"]:
            raise CheckpointError(
                f"{file}: {size} bytes, meta.json recorded {want['bytes']}; the file is truncated or damaged"
            )
        got = file_digest(file)[DIGEST]
        if got != want[DIGEST]:
            raise CheckpointError(
                f"{file}: {DIGEST} {got[:16]} does not match meta.json's {want[DIGEST][:16]}; the file is damaged"
            )
    return meta


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
    meta: Callable[[], dict[str, Any]] | None = None,
    verify_and_prune: bool = True,
) -> Path:
    """Collective: every rank calls it. ``global_state`` and ``meta`` are only evaluated on rank 0.

    ``meta`` adds keys to meta.json (read without loading the state, e.g. by pre-flight).
    With ``verify_and_prune``, rank 0 reads the new checkpoint back, verifies it and only then
    prunes; a graceful stop skips that to stay inside its grace period (the next save prunes).
    """
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
    name = rank_file(comm.rank)
    digest = write_file_durably(partial / name, lambda f: torch.save(to_cpu(rank_state), f))
    # No object collectives on every device: each rank leaves its digest in a side file.
    write_json_durably(partial / _digest_file(name), digest)
    if comm.rank == 0:
        state = to_cpu(global_state())
        state_digest = write_file_durably(partial / STATE_FILE, lambda f: torch.save(state, f))
    comm.barrier()
    if comm.rank == 0:
        files = {STATE_FILE: state_digest}
        for r in range(comm.world_size):
            side = partial / _digest_file(rank_file(r))
            files[rank_file(r)] = json.loads(side.read_text())
            side.unlink()
        extra = meta() if meta is not None else {}
        write_json_durably(
            partial / META_FILE, {**extra, "step": step, "world_size": comm.world_size, "files": files}
        )
        fsync_dir(partial)
        _commit(partial, final)
        if verify_and_prune:
            try:
                verify(final)
            except CheckpointError as e:
                log.error("checkpoint %s failed verification after writing, nothing pruned: %s", final, e)
            else:
                prune(root, keep, verified_step=step)
    return final


def _digest_file(name: str) -> str:
    return f".{name}.digest.json"


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


def prune(root: Path, keep: int, verified_step: int) -> None:
    """Keep the checkpoint of ``verified_step`` (just verified) and the ``keep - 1`` before it.

    Older complete checkpoints and stale partial dirs up to that step are deleted. Newer ones
    (left by a run that resumed from an older checkpoint because they failed verification) are
    left for the save of their step to replace.
    """
    found = complete_checkpoints(root)
    upto = [s for s, _ in found if s <= verified_step]
    cutoff = upto[-keep] if len(upto) >= keep else -1
    for step, path in found:
        if step < cutoff:
            shutil.rmtree(path, ignore_errors=True)
    for p in root.iterdir():
        m = re.match(r"^\.step_(\d{8})\.(partial|old)$", p.name)
        if m and int(m.group(1)) <= verified_step:
            shutil.rmtree(p, ignore_errors=True)


@dataclass
class Loaded:
    path: Path
    step: int
    world_size: int
    state: dict[str, Any]
    rank_state: dict[str, Any] | None  # None when the world size changed
    meta: dict[str, Any]


def _load(file: Path, *, mmap: bool = False) -> Any:
    try:
        # weights_only=False: the files hold RNG states (tuples, numpy arrays) we wrote ourselves.
        return torch.load(file, map_location="cpu", weights_only=False, mmap=mmap)
    except Exception as e:  # noqa: BLE001 - any unpickling failure means this file is unusable
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise CheckpointError(f"{file}: cannot be loaded ({type(e).__name__}: {first})") from None


def load_state(path: Path, *, mmap: bool = False) -> dict[str, Any]:
    """A checkpoint's ``state.pt`` alone, to CPU (its digests checked by the caller: ``verify``).

    ``mmap``: its tensors are mapped from the file, not read, until used (what reads only the
    run's flags and records, as the model card does of an earlier phase, reads no weights)."""
    state = _load(path / STATE_FILE, mmap=mmap)
    if not isinstance(state, dict):
        raise CheckpointError(f"{path / STATE_FILE}: holds a {type(state).__name__}, not a state dict")
    return state


def load_checkpoint(path: Path, rank: int, world_size: int, *, verified: bool = False) -> Loaded:
    """Verify (unless ``verified``) and read a checkpoint to CPU; the rank part only if the
    world size matches. CheckpointError (one line, naming the file) when it is unusable."""
    meta = read_meta(path) if verified else verify(path)
    state = _load(path / STATE_FILE)
    rank_state = None
    if int(meta["world_size"]) == world_size:
        rank_state = _load(path / rank_file(rank))
    else:
        log.warning(
            "checkpoint %s was written by %s ranks, this run has %s: data positions and RNG "
            "states cannot be mapped; each rank starts its data stream at a fresh epoch",
            path,
            meta["world_size"],
            world_size,
        )
    return Loaded(path, int(meta["step"]), int(meta["world_size"]), state, rank_state, meta)


def step_dirs(root: Path) -> list[tuple[int, Path]]:
    """(step, path) of every directory under its final ``step_*`` name, complete or not, oldest first."""
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := _STEP_RE.match(p.name)) and p.is_dir()]
    return sorted(found)


def resume_candidates(root: Path, requested: str) -> list[Path]:
    """The checkpoints to try, best first.

    ``auto``: every ``step_*`` directory under ``root``, newest first. A path: the ones under
    ``root`` newer than it (a restart of a run that began from it continues its own), then it.
    """
    found = [p for _, p in reversed(step_dirs(root))]
    if requested == "auto":
        return found
    path = Path(requested)
    if not path.is_dir():
        raise CheckpointError(
            f"--resume_ckpt {path}: no such checkpoint directory; give a step_* directory or 'auto'"
        )
    step = int(read_meta(path)["step"])
    newer = [p for p in found if int(p.name.split("_")[1]) > step and p.resolve() != path.resolve()]
    return [*newer, path]


def first_verified(candidates: list[Path]) -> tuple[list[Path], dict[str, Any] | None]:
    """Verify ``candidates`` in order; return (the first that passes and those after it, its meta).

    Each one that fails is skipped with a one-line warning. ``([], None)`` when there were no
    candidates (a fresh start); CheckpointError when there were some and none passed: starting
    from scratch would throw away the run, so that is for the user to decide.
    """
    found = _first_that_works(candidates, lambda i, path: (candidates[i:], verify(path)), "is usable")
    return found if found is not None else ([], None)


def load_first_usable(candidates: list[Path], rank: int, world_size: int) -> Loaded | None:
    """Load the first of ``candidates`` that loads (the first is taken as verified: see
    ``first_verified``); the others are verified first. Same skipping and errors."""
    return _first_that_works(
        candidates,
        lambda i, path: load_checkpoint(path, rank, world_size, verified=i == 0),
        "could be loaded",
    )


def _first_that_works(candidates: list[Path], attempt: Callable[[int, Path], T], failing: str) -> T | None:
    """``attempt(i, candidates[i])`` for each candidate until one raises no CheckpointError; each
    failure is a one-line warning naming the checkpoint. None when there are no candidates."""
    errors = []
    for i, path in enumerate(candidates):
        try:
            return attempt(i, path)
        except CheckpointError as e:
            log.warning("checkpoint %s skipped: %s", path.name, e)
            errors.append(str(e))
    if errors:
        raise CheckpointError(
            f"none of the {len(errors)} checkpoints {failing} (newest: {errors[0]}); move the damaged "
            "ones out of the checkpoint directory to fall back further or start over"
        )
    return None
