"""Pretraining data: HDF5 shards -> per-rank, resumable stream of batches.

Shard format and manifest: ``training.dataprep.shard_format``; every dataset is checked on load.

How samples are spread (all a pure function of seed, epoch, rank and world size):

* Each epoch the sorted shard list is permuted with ``seed``/``epoch``. With F shards and W
  ranks, rank r reads shards ``perm[r], perm[r+W], ...`` (F // W of them; the F % W left over
  differ from epoch to epoch). With F < W, the ranks sharing a shard take disjoint strided
  parts of it.
* Inside a shard (part) the samples are permuted with ``seed``/``epoch``/shard; batches are
  consecutive slices; a tail shorter than a batch is dropped.
* A position ``(epoch, piece, offset)`` names the next sample to read, so a resumed run reads
  exactly the samples an uninterrupted one would. Every batch carries the position *after*
  it (``data_position``), so the training loop knows where it is however far the loader
  has read ahead.

Memory: a shard is held at its stored dtypes (int32/int8), plus the one being prefetched by a
background thread; int64 tensors are made per batch only.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import h5py
import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset

from ..dataprep.shard_format import SHARD_FIELDS, read_manifest

IGNORE_INDEX = -100


class ShardFormatError(ValueError):
    """A shard does not match the expected format; the message names the file and the key."""


@dataclass(frozen=True)
class DataPosition:
    """Where a rank's stream continues: epoch, index into its shard list, sample offset."""

    epoch: int = 0
    piece: int = 0
    offset: int = 0

    def as_list(self) -> list[int]:
        return [self.epoch, self.piece, self.offset]


@dataclass(frozen=True)
class Shard:
    """One shard's arrays at their stored dtypes."""

    path: str
    arrays: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.arrays["next_sentence_labels"])

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays.values())


def list_shards(data_dir: str) -> list[str]:
    """The shard files to train on, sorted so all ranks agree.

    ``data_dir`` is a shard set (a directory with its ``manifest.json``: only a complete set
    has one) or one HDF5 file, such as the single ``--output_file`` of the reference data tool.

    Raises:
        FileNotFoundError: nothing at ``data_dir``.
        ManifestError: a directory without a valid manifest, or with listed shards missing.
    """
    if os.path.isfile(data_dir):
        return [data_dir]
    if not os.path.isdir(data_dir):
        raise FileNotFoundError(
            f"--data_dir {data_dir}: no such directory or file; give a shard set or an HDF5 file"
        )
    manifest = read_manifest(data_dir)
    return sorted(os.path.join(data_dir, entry.name) for entry in manifest.shards)


def _open(path: str) -> h5py.File:
    try:
        return h5py.File(path, "r")
    except OSError as e:  # h5py's message does not name the file
        raise ShardFormatError(f"{path}: not a readable HDF5 file ({e}); re-create or remove it") from None


def check_shard(path: str, seq_len: int, max_pred_len: int) -> int:
    """Check a shard's datasets (names, dtypes, shapes) from its header, reading no data.

    Returns the number of samples; raises ShardFormatError naming the file and the key.
    """
    with _open(path) as f:
        return _check_datasets(f, path, seq_len, max_pred_len)


def _check_datasets(f: h5py.File, path: str, seq_len: int, max_pred_len: int) -> int:
    widths = {"seq": seq_len, "pred": max_pred_len}
    n = None
    for key, (dtype, width) in SHARD_FIELDS.items():
        if key not in f or not isinstance(f[key], h5py.Dataset):
            raise ShardFormatError(f"{path}: missing dataset '{key}'")
        ds = f[key]
        if ds.dtype != dtype:
            raise ShardFormatError(f"{path}: dataset '{key}' has dtype {ds.dtype}, expected {dtype}")
        expected = "[N]" if width is None else f"[N, {widths[width]}]"
        shape_ok = len(ds.shape) == (1 if width is None else 2) and (
            width is None or ds.shape[1] == widths[width]
        )
        if not shape_ok or (n is not None and ds.shape[0] != n):
            raise ShardFormatError(
                f"{path}: dataset '{key}' has shape {list(ds.shape)}, expected {expected}"
                + (f" with N={n}" if n is not None else "")
            )
        n = ds.shape[0]
    return int(n or 0)


def read_shard(path: str, seq_len: int, max_pred_len: int, vocab_size: int | None = None) -> Shard:
    """Load and check every dataset of a shard; raise ShardFormatError naming file and key."""
    with _open(path) as f:
        _check_datasets(f, path, seq_len, max_pred_len)
        try:
            # reads at the stored dtype: no widening of the whole shard
            arrays = {key: f[key][()] for key in SHARD_FIELDS}
        except OSError as e:  # a damaged chunk (bad gzip stream) shows only when read
            raise ShardFormatError(f"{path}: data unreadable ({e}); re-create or remove it") from None
    _check_values(path, arrays, seq_len, vocab_size)
    return Shard(path, arrays)


def _check_values(path: str, arrays: dict[str, np.ndarray], seq_len: int, vocab_size: int | None) -> None:
    # Out-of-range ids fail late and obscurely on an accelerator (an XLA gather clamps
    # silently), so check them once per shard here.
    pos = arrays["masked_lm_positions"]
    if pos.size and (pos.min() < 0 or pos.max() >= seq_len):
        raise ShardFormatError(f"{path}: dataset 'masked_lm_positions' has values outside [0, {seq_len})")
    if vocab_size is not None:
        for key in ("input_ids", "masked_lm_ids"):
            a = arrays[key]
            if a.size and (a.min() < 0 or a.max() >= vocab_size):
                raise ShardFormatError(f"{path}: dataset '{key}' has ids outside [0, {vocab_size})")


def make_batch(shard: Shard, index: np.ndarray) -> dict[str, torch.Tensor]:
    """Tensors for the samples ``index`` of ``shard``: model inputs and both label forms.

    ``labels`` is the dense MLM target ([B, S], -100 off the masked positions);
    ``mlm_positions``/``mlm_targets`` are the sparse form ([B, P], target -100 on padding).
    The first 0 in ``masked_lm_positions`` ends a sample's list (position 0 is [CLS], never
    masked), so later entries are padding even if non-zero.
    """
    a = shard.arrays
    positions = a["masked_lm_positions"][index].astype(np.int64)
    valid = np.cumprod(positions != 0, axis=1).astype(bool)
    positions[~valid] = 0
    targets = np.where(valid, a["masked_lm_ids"][index], IGNORE_INDEX).astype(np.int64)
    input_ids = a["input_ids"][index]
    labels = np.full(input_ids.shape, IGNORE_INDEX, dtype=np.int64)
    rows, cols = np.nonzero(valid)
    labels[rows, positions[rows, cols]] = targets[rows, cols]
    return {
        "input_ids": torch.from_numpy(input_ids.astype(np.int64)),
        "attention_mask": torch.from_numpy(a["input_mask"][index].astype(np.int64)),
        "token_type_ids": torch.from_numpy(a["segment_ids"][index].astype(np.int64)),
        "labels": torch.from_numpy(labels),
        "mlm_positions": torch.from_numpy(positions),
        "mlm_targets": torch.from_numpy(targets),
        "next_sentence_label": torch.from_numpy(a["next_sentence_labels"][index].astype(np.int64)),
    }


@dataclass(frozen=True)
class Piece:
    """A shard, or a strided part of it when several ranks share it (F < W)."""

    file_index: int
    part: int = 0
    parts: int = 1


def epoch_pieces(num_files: int, world_size: int, rank: int, seed: int, epoch: int) -> list[Piece]:
    """The shards (parts) rank ``rank`` reads in ``epoch``; same answer on every rank."""
    if num_files < 1:
        raise ValueError("epoch_pieces: no shards")
    perm = np.random.default_rng([seed, epoch]).permutation(num_files)
    if num_files >= world_size:
        per_rank = num_files // world_size
        return [Piece(int(perm[rank + k * world_size])) for k in range(per_rank)]
    slot = rank % num_files
    sharers = len(range(slot, world_size, num_files))
    return [Piece(int(perm[slot]), part=rank // num_files, parts=sharers)]


def piece_order(num_samples: int, piece: Piece, seed: int, epoch: int) -> np.ndarray:
    """Sample indices of a piece in reading order (shuffled per epoch)."""
    perm = np.random.default_rng([seed, epoch, piece.file_index]).permutation(num_samples)
    return perm[piece.part :: piece.parts]


class ShardStream(IterableDataset):
    """Endless stream of this rank's batches, starting at ``start``.

    Yields batch dicts (see ``make_batch``) plus ``data_position``: an int64 tensor
    ``[epoch, piece, offset]`` naming the sample after this batch. The next piece's shard is
    loaded by a background thread while the current one is consumed.
    """

    def __init__(
        self,
        files: list[str],
        *,
        batch_size: int,
        seq_len: int,
        max_pred_len: int,
        rank: int = 0,
        world_size: int = 1,
        seed: int = 0,
        start: DataPosition = DataPosition(),
        vocab_size: int | None = None,
    ) -> None:
        super().__init__()
        if not files:
            raise ValueError("ShardStream: no shard files")
        if batch_size < 1:
            raise ValueError("ShardStream: batch_size must be >= 1")
        self.files = list(files)
        self.batch_size = batch_size
        self.seq_len = seq_len
        self.max_pred_len = max_pred_len
        self.rank = rank
        self.world_size = world_size
        self.seed = seed
        self.start = start
        self.vocab_size = vocab_size

    def _pieces(self, epoch: int) -> list[Piece]:
        return epoch_pieces(len(self.files), self.world_size, self.rank, self.seed, epoch)

    def _load(self, piece: Piece) -> Shard:
        return read_shard(self.files[piece.file_index], self.seq_len, self.max_pred_len, self.vocab_size)

    def _walk(self) -> Iterator[tuple[int, int, Piece]]:
        """(epoch, piece index, piece) from the start position on, forever."""
        epoch, k = self.start.epoch, self.start.piece
        while True:
            pieces = self._pieces(epoch)
            while k < len(pieces):
                yield epoch, k, pieces[k]
                k += 1
            epoch, k = epoch + 1, 0

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        walk = self._walk()
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="shard-prefetch")
        try:
            epoch, k, piece = next(walk)
            pending: Future[Shard] = pool.submit(self._load, piece)
            offset = self.start.offset
            empty_run = 0
            while True:
                shard = pending.result()
                nxt = next(walk)
                pending = pool.submit(self._load, nxt[2])  # prefetch while this one is read
                order = piece_order(len(shard), piece, self.seed, epoch)
                produced = False
                while offset + self.batch_size <= len(order):
                    index = np.sort(order[offset : offset + self.batch_size])
                    offset += self.batch_size
                    batch = make_batch(shard, index)
                    batch["data_position"] = torch.tensor([epoch, k, offset], dtype=torch.int64)
                    produced = True
                    yield batch
                del shard  # drop our reference before the next one arrives
                empty_run = 0 if produced else empty_run + 1
                if empty_run > 2 * len(self.files) + 2:
                    raise ValueError(
                        f"no shard part holds a full batch of {self.batch_size} samples; "
                        "use a smaller --batch_size or bigger shards"
                    )
                (epoch, k, piece), offset = nxt, 0
        finally:
            pool.shutdown(wait=False, cancel_futures=True)


def position_from_tensor(t: torch.Tensor) -> DataPosition:
    """Inverse of the ``data_position`` tensor carried by each batch."""
    epoch, piece, offset = (int(v) for v in t.tolist())
    return DataPosition(epoch, piece, offset)


def make_loader(stream: ShardStream, *, num_workers: int = 0, pin_memory: bool = False) -> DataLoader:
    """A DataLoader over the (already batched) stream.

    ``num_workers`` is 0 (read in the training process; shard prefetch still runs in a
    thread) or 1 (the whole stream runs in one loader process, overlapping batch assembly
    with the step). More than one worker would make each hold its own shard and break the
    exact, resumable sample order, so it is refused.
    """
    if num_workers not in (0, 1):
        raise ValueError(
            f"num_workers: {num_workers} not supported; use 0 or 1 (each extra loader process "
            "would hold its own shard and the sample order would no longer be resumable)"
        )
    return DataLoader(
        stream,
        batch_size=None,  # the stream yields whole batches
        num_workers=num_workers,
        pin_memory=pin_memory,
        prefetch_factor=4 if num_workers else None,
        persistent_workers=False,
        # Its own generator: creating an iterator draws a seed from it, and drawing from the
        # global one would shift the dropout RNG stream a resumed run restores.
        generator=torch.Generator(),
        worker_init_fn=_own_process_group if num_workers else None,
    )


def _own_process_group(_worker_id: int) -> None:
    # torchrun stops a worker by signalling its whole process group; a loader process dying of
    # that SIGTERM would make the DataLoader raise in the trainer before its last step and
    # checkpoint (training.trainer.stop). In a group of its own it still ends with the trainer:
    # DataLoader's shutdown (which signals its pid, not the group) or its parent-exit watchdog.
    os.setpgid(0, 0)
