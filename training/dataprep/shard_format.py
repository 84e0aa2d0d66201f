"""The pretraining shard format and the manifest of a shard set, in one place.

A shard set is a directory of HDF5 shards plus ``manifest.json``. The writer
(``training.dataprep.prepare_data``), the reader (``training.trainer.data``) and the staging Job
(``trainium_eks.dataset_staging``) all use the names below, and a reader accepts a directory
only with its manifest: a set that a crash or a signal cut short has none, so it is never
trained on by mistake.

Shard datasets (gzip-compressed, the layout of the public Neuron/NVIDIA BERT shards):

=====================  =======  =====
key                    shape    dtype
=====================  =======  =====
input_ids              [N, S]   int32
input_mask             [N, S]   int8
segment_ids            [N, S]   int8
masked_lm_positions    [N, P]   int32
masked_lm_ids          [N, P]   int32
next_sentence_labels   [N]      int8
=====================  =======  =====

Manifest (JSON): ``format``, ``version``, ``count`` (shards), ``samples``, ``seq_len``,
``max_pred_len``, ``seed`` (null when unknown), ``settings`` (what made the set), and
``shards``: ``name``, ``samples``, ``bytes``, ``sha256`` of each file, sorted by name. It holds
no time stamp or absolute path, so the same set always gets the same manifest.

    python -m training.dataprep.shard_format write DIR [--pattern '*_training_*.hdf5'] [--source URI]
    python -m training.dataprep.shard_format verify DIR

``write`` makes a manifest for shards made elsewhere (the public set, the reference tool's
output); ``verify`` checks sizes and checksums.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from trainium_job.paths import MANIFEST_NAME, SHARD_PATTERN

from . import interrupt

MANIFEST_FORMAT = "bert-pretraining-hdf5"
MANIFEST_VERSION = 1

# key -> (NumPy dtype name, second dimension: "seq" = seq_len, "pred" = max_pred_len, None = 1-D).
# Names, not np.dtype objects: this module is standard library only.
SHARD_FIELDS: dict[str, tuple[str, str | None]] = {
    "input_ids": ("int32", "seq"),
    "input_mask": ("int8", "seq"),
    "segment_ids": ("int8", "seq"),
    "masked_lm_positions": ("int32", "pred"),
    "masked_lm_ids": ("int32", "pred"),
    "next_sentence_labels": ("int8", None),
}
_HASH_BLOCK = 1 << 20


class ShardSetError(ValueError):
    """A shard set or its output directory cannot be used; the message names it and the fix."""


class ManifestError(ShardSetError):
    """A shard set without a usable manifest; the message names the directory or file and the fix."""


@dataclass(frozen=True)
class ShardEntry:
    name: str
    samples: int
    bytes: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    shards: tuple[ShardEntry, ...]
    seq_len: int
    max_pred_len: int
    seed: int | None = None
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def samples(self) -> int:
        return sum(s.samples for s in self.shards)

    def to_json(self) -> str:
        body = {
            "format": MANIFEST_FORMAT,
            "version": MANIFEST_VERSION,
            "count": len(self.shards),
            "samples": self.samples,
            "seq_len": self.seq_len,
            "max_pred_len": self.max_pred_len,
            "seed": self.seed,
            "settings": self.settings,
            "shards": [asdict(s) for s in self.shards],
        }
        return json.dumps(body, indent=1, sort_keys=True) + "\n"


def sha256_of(path: str | os.PathLike[str]) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(_HASH_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def shard_entry(path: str | os.PathLike[str], samples: int) -> ShardEntry:
    """The manifest line of one written shard."""
    path = Path(path)
    return ShardEntry(path.name, samples, path.stat().st_size, sha256_of(path))


def write_manifest(directory: str | os.PathLike[str], manifest: Manifest) -> Path:
    """Write ``manifest.json`` into ``directory`` (atomically: it is the set's commit record)."""
    target = Path(directory) / MANIFEST_NAME
    partial = target.with_name(target.name + ".partial")
    partial.write_text(manifest.to_json(), encoding="utf-8")
    partial.replace(target)
    return target


def read_manifest(directory: str | os.PathLike[str]) -> Manifest:
    """Read and check a set's manifest; every listed shard must exist with its recorded size.

    Raises:
        ManifestError: no manifest (naming the shards found, and how to make one), an
            unreadable manifest, or a listed shard missing or of another size.
    """
    directory = Path(directory)
    path = directory / MANIFEST_NAME
    if not path.is_file():
        found = sorted(p.name for p in directory.glob(SHARD_PATTERN)) if directory.is_dir() else []
        what = (
            f"{len(found)} {SHARD_PATTERN} file(s) but no {MANIFEST_NAME}" if found else f"no {MANIFEST_NAME}"
        )
        raise ManifestError(
            f"{directory}: {what}; a shard set is used only with its manifest (an interrupted run "
            f"leaves none). If the shards are complete, make one with `python -m training.dataprep.shard_format "
            f"write {directory}`, or point at a single HDF5 file"
        )
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
        if body.get("format") != MANIFEST_FORMAT or body.get("version") != MANIFEST_VERSION:
            raise KeyError("format")
        manifest = Manifest(
            shards=tuple(ShardEntry(**entry) for entry in body["shards"]),
            seq_len=int(body["seq_len"]),
            max_pred_len=int(body["max_pred_len"]),
            seed=body.get("seed"),
            settings=dict(body.get("settings", {})),
        )
    except (ValueError, KeyError, TypeError) as err:
        raise ManifestError(
            f"{path}: not a {MANIFEST_FORMAT} v{MANIFEST_VERSION} manifest ({err!r}); remake it with "
            f"`python -m training.dataprep.shard_format write {directory}`"
        ) from None
    if not manifest.shards:
        raise ManifestError(f"{path}: lists no shards; the set is empty")
    for entry in manifest.shards:
        shard = directory / entry.name
        if not shard.is_file() or shard.stat().st_size != entry.bytes:
            state = (
                "is missing"
                if not shard.is_file()
                else f"has {shard.stat().st_size} bytes, not {entry.bytes}"
            )
            raise ManifestError(f"{path}: shard {entry.name} {state}; the set is incomplete or was changed")
    return manifest


def verify_checksums(directory: str | os.PathLike[str], threads: int = 8) -> Manifest:
    """``read_manifest`` plus every shard's SHA-256; raises ManifestError on the first mismatch."""
    manifest = read_manifest(directory)
    names = [e.name for e in manifest.shards]
    with ThreadPoolExecutor(threads) as pool:  # hashlib releases the GIL on large blocks
        digests = list(pool.map(lambda n: sha256_of(Path(directory) / n), names))
    for entry, digest in zip(manifest.shards, digests, strict=True):
        if digest != entry.sha256:
            raise ManifestError(
                f"{Path(directory) / entry.name}: SHA-256 {digest} differs from the manifest's"
            )
    return manifest


def manifest_for_existing(
    directory: str | os.PathLike[str],
    pattern: str = SHARD_PATTERN,
    source: str | None = None,
    threads: int = 8,
) -> Manifest:
    """Describe shards made elsewhere: counts and shapes read from each file, checksums computed."""
    import h5py  # the reader needs it anyway; kept local so the constants import without it

    directory = Path(directory)
    names = sorted(p.name for p in directory.iterdir() if p.is_file() and fnmatch.fnmatch(p.name, pattern))
    if not names:
        raise ManifestError(f"{directory}: no files match {pattern!r}; give --pattern for other shard names")
    shapes = set()
    counts = []
    for name in names:
        try:
            with h5py.File(directory / name, "r") as handle:
                counts.append(int(handle["next_sentence_labels"].shape[0]))
                shapes.add((int(handle["input_ids"].shape[1]), int(handle["masked_lm_positions"].shape[1])))
        except (OSError, KeyError) as err:
            raise ManifestError(f"{directory / name}: not a shard of this format ({err})") from None
    if len(shapes) != 1:
        raise ManifestError(
            f"{directory}: shards of different shapes (seq_len, max_pred_len) {sorted(shapes)}"
        )
    ((seq_len, max_pred_len),) = shapes
    with ThreadPoolExecutor(threads) as pool:
        digests = list(pool.map(lambda n: sha256_of(directory / n), names))
    entries = tuple(
        ShardEntry(n, c, (directory / n).stat().st_size, d)
        for n, c, d in zip(names, counts, digests, strict=True)
    )
    settings = {"source": source} if source else {}
    return Manifest(entries, seq_len, max_pred_len, None, settings)


# ---------------------------------------------------------------------------------------------
# Publishing: a set is built in a hidden sibling directory and renamed into place when complete.


def open_staging(output_dir: str | os.PathLike[str], overwrite: bool) -> Path:
    """Check ``output_dir`` and make the staging directory its set is written into.

    ``output_dir`` may be absent, empty, or (with ``overwrite``) hold a shard set and nothing
    else: the published set replaces the directory as a whole. The staging directory is a
    sibling (same file system, so publishing is a rename); ``discard`` or ``publish`` it.

    Raises:
        ShardSetError: ``output_dir`` is a file, holds other files, holds shards without
            ``overwrite``, or its parent cannot be written.
    """
    out = Path(output_dir)
    if out.exists() and not out.is_dir():
        raise ShardSetError(f"--output_dir {out}: exists and is not a directory; choose a directory path")
    if out.is_dir():
        entries = sorted(p.name for p in out.iterdir())
        shards = [n for n in entries if fnmatch.fnmatch(n, SHARD_PATTERN)]
        others = [n for n in entries if n not in shards and n != MANIFEST_NAME]
        if others:
            raise ShardSetError(
                f"--output_dir {out}: holds other files ({', '.join(others[:3])}{', ...' if len(others) > 3 else ''}); "
                "a shard set replaces its directory as a whole: choose a new or empty directory"
            )
        if entries and not overwrite:
            raise ShardSetError(
                f"--output_dir {out}: already holds {len(shards)} shard(s) (*_training_*.hdf5); pass "
                "--overwrite to replace them, or choose another --output_dir"
            )
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=f".{out.name}.staging-", dir=out.parent))
    except OSError as err:
        raise ShardSetError(
            f"--output_dir {out}: cannot write in {out.parent} ({err.strerror}); choose a directory you can write to"
        ) from None


def current_umask() -> int:
    """The process's umask. POSIX has no call that only reads it: it is set and put back."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def discard(staging: str | os.PathLike[str]) -> None:
    shutil.rmtree(staging, ignore_errors=True)


def publish(staging: str | os.PathLike[str], output_dir: str | os.PathLike[str]) -> None:
    """Rename the complete set (its manifest written) into ``output_dir``, with the folder mode
    the umask gives a new folder (not the staging folder's 0700).

    A stop signal during the renames is held until they are done: afterwards the directory
    holds the old set or the new one, never a mix and never nothing but a half.
    """
    staging, out = Path(staging), Path(output_dir)
    if not (staging / MANIFEST_NAME).is_file():
        raise ShardSetError(f"{staging}: no {MANIFEST_NAME}; only a complete set is published")
    # mkdtemp made the staging folder 0700; the published one gets what mkdir would have given.
    os.chmod(staging, 0o777 & ~current_umask())
    old = out.parent / f".{out.name}.replaced-{os.getpid()}"
    interrupt.check()  # a signal an extension swallowed earlier still stops us before publishing
    with interrupt.deferred_signals():
        replacing = out.is_dir() and any(out.iterdir())
        if replacing:
            os.rename(out, old)
        os.rename(staging, out)  # replaces an empty directory in one step (rename(2))
    if replacing:
        shutil.rmtree(old, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m training.dataprep.shard_format", description=__doc__.split("\n")[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    write = commands.add_parser("write", help="make manifest.json for the shards in DIR")
    write.add_argument("directory")
    write.add_argument(
        "--pattern", default=SHARD_PATTERN, help=f"shard file names (default: {SHARD_PATTERN})"
    )
    write.add_argument("--source", default=None, help="where the shards came from, recorded in the manifest")
    verify = commands.add_parser("verify", help="check DIR's shards against its manifest (sizes, SHA-256)")
    verify.add_argument("directory")
    args = parser.parse_args(argv)
    try:
        if args.command == "write":
            manifest = manifest_for_existing(args.directory, args.pattern, args.source)
            write_manifest(args.directory, manifest)
            print(
                f"{args.directory}/{MANIFEST_NAME}: {len(manifest.shards)} shards, {manifest.samples} samples"
            )
        else:
            manifest = verify_checksums(args.directory)
            print(
                f"{args.directory}: {len(manifest.shards)} shards, {manifest.samples} samples, checksums match"
            )
    except (ManifestError, OSError) as err:
        print(f"{parser.prog}: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
