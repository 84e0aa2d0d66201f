"""Writing shards: the spool records of one shard as HDF5 in the shard format
(``training.shard_format``), and the seeded assignment of samples to shards.

The arrays are made at their final dtypes (``SHARD_FIELDS``); each dataset uses HDF5's shuffle
and gzip filters with chunks deflated here by zlib-ng, so any HDF5 reader reads them.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
from zlib_ng import zlib_ng

from training.bert_samples import ROUTE, PrepConfig, rngs
from training.shard_format import SHARD_FIELDS


def write_hdf5(path: Path, records: np.ndarray, cfg: PrepConfig) -> None:
    """Write spool records as one shard in the interchange format (atomically renamed)."""
    pos = np.arange(cfg.max_seq_len, dtype=np.int32)[None, :]
    length = records["length"][:, None].astype(np.int32)
    len_a = records["len_a"][:, None].astype(np.int32)
    values = {
        "input_ids": records["ids"],
        # bool is one byte of 0 or 1: viewing it as int8 saves a copy.
        "input_mask": (pos < length).view(np.int8),
        "segment_ids": ((pos >= len_a + 2) & (pos < length)).view(np.int8),
        "masked_lm_positions": records["positions"],
        "masked_lm_ids": records["labels"],
        "next_sentence_labels": records["next_sentence"],
    }
    arrays = {name: values[name].astype(dtype, copy=False) for name, (dtype, _) in SHARD_FIELDS.items()}
    partial = path.with_name(path.name + ".partial")
    with h5py.File(partial, "w") as handle:
        for name, array in arrays.items():
            _write_gzip_dataset(handle, name, array)
    partial.replace(path)


_CHUNK_ROWS = 1024  # whole-row chunks: readers take runs of samples, never columns


def _write_gzip_dataset(handle: h5py.File, name: str, array: np.ndarray) -> None:
    """A dataset with HDF5's byte-shuffle and gzip (deflate) filters, its chunks compressed here.

    HDF5 would deflate with zlib; zlib-ng (the ``zlib-ng`` package) writes the same standard
    stream about 3x faster at level 1. Each chunk is shuffled as
    the shuffle filter does (all first bytes of the elements, then all second bytes, ...) and
    stored as it is, so any HDF5 reader undoes both filters. Shuffle + deflate level 1 makes
    smaller files than plain gzip level 4 (about 12.8 vs 15.0 MB for 65,536 samples).
    """
    rows = max(1, min(len(array), _CHUNK_ROWS))
    dataset = handle.create_dataset(
        name,
        shape=array.shape,
        dtype=array.dtype,
        chunks=(rows, *array.shape[1:]),
        compression="gzip",
        compression_opts=1,
        shuffle=True,
    )
    width = array.dtype.itemsize
    for start in range(0, len(array), rows):
        block = array[start : start + rows]
        if len(block) < rows:  # an edge chunk is stored whole; rows past the end are never read
            block = np.concatenate([block, np.zeros((rows - len(block), *array.shape[1:]), array.dtype)])
        planes = np.ascontiguousarray(block).view(np.uint8).reshape(-1, width).T
        dataset.id.write_direct_chunk((start,) + (0,) * (array.ndim - 1), _deflate(planes.tobytes()))


def _deflate(data: bytes) -> bytes:
    """A zlib stream of ``data`` at level 1 (what HDF5's gzip filter reads).

    zlib-ng rather than ISA-L (6x zlib's speed, 20 % smaller shards): ISA-L 1.9.1 at level 1
    made different (valid) streams for the same chunk in different processes, about one chunk
    in ten 1- or 2-worker runs of the 42 MB bench corpus, which broke the byte-identical output
    for a seed. zlib-ng's one-shot deflate depends on its input alone.
    """
    return zlib_ng.compress(data, 1)


def shard_labels(samples: int, num_shards: int, work_dir: Path, seed: int) -> Path:
    """A balanced, randomly drawn shard number per spooled sample, saved for the shard writers."""
    sizes = np.full(num_shards, samples // num_shards, dtype=np.int64)
    sizes[: samples % num_shards] += 1
    label_type = np.uint16 if num_shards <= 1 << 16 else np.uint32
    labels = np.repeat(np.arange(num_shards, dtype=label_type), sizes)
    _, np_rng = rngs(seed, ROUTE)
    np_rng.shuffle(labels)
    path = work_dir / "shard-labels.npy"
    np.save(path, labels)
    return path
