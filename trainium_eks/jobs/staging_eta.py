"""How long a staging Job takes, from what it moves and the file system's throughput: the review's
staging lines and the deadlines of whoever waits for the shards.

A staging Job moves its source through the file system at the FSx throughput (the file system's
baseline: capacity x per-TiB throughput, FSx for Lustre User Guide, "Performance"): the shards
are written once (the archive is streamed and unpacked, the temporary directory renamed into
place) and read once more for their SHA-256 (``training.dataprep.shard_format write``); an
imported start checkpoint is written, read for its digest, read by the import and its weights
written. Before that, the Job's node starts: on Karpenter's dataset node its launch and the
training image's pull; a fixed nodegroup's node is up and holds the image.

The deadline of a wait for a staging Job is twice its estimate, rounded up to five minutes: the
estimate is taken from list figures, the deadline is what a healthy staging never meets.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from trainium_job.stop_budget import fsx_write_bytes_per_s

from ..images.image_build import pull_minutes
from ..nodes.gang_wait import NODE_LAUNCH_MINUTES
from .dataset_staging import PUBLIC_SOURCE_BYTES

#: A wait for a source whose size is unknown (not a public source of the table): four hours,
#: time for 1 TB at the default file system's 146.5 MB/s twice over.
UNKNOWN_SIZE_DEADLINE_S: Final = 4 * 3600
#: The deadline is this many times the estimate.
DEADLINE_FACTOR: Final = 2
#: ... rounded up to this many seconds.
DEADLINE_ROUNDING_S: Final = 300
#: Passes of the shards' bytes through the file system: written, then read for the manifest.
SHARD_PASSES: Final = 2
#: Passes of an imported start checkpoint: downloaded, read for its digest, read by the import.
START_PASSES: Final = 3
#: The import writes the weights alone: float32 parameters, a third of the checkpoint's 12 bytes each.
START_WEIGHTS_SHARE: Final = 1 / 3


@dataclass(frozen=True)
class StagingEstimate:
    """One staging Job's time: its node's start, its transfer, in minutes (None: size unknown)."""

    source: str
    source_bytes: int | None
    start_bytes: int | None
    node_minutes: float
    move_minutes: float | None
    bytes_per_s: float

    @property
    def minutes(self) -> float | None:
        return None if self.move_minutes is None else self.node_minutes + self.move_minutes

    @property
    def deadline_s(self) -> int:
        """What a wait for this Job allows (see the module docstring)."""
        if self.minutes is None:
            return UNKNOWN_SIZE_DEADLINE_S
        seconds = DEADLINE_FACTOR * self.minutes * 60
        return int(math.ceil(seconds / DEADLINE_ROUNDING_S) * DEADLINE_ROUNDING_S)

    def explain(self) -> str:
        """One line: what it moves, at what rate, and its estimate."""
        rate = f"{self.bytes_per_s / 1e6:,.1f} MB/s"
        if self.move_minutes is None:
            return f"size of {self.source} unknown: deadline {UNKNOWN_SIZE_DEADLINE_S // 60} min"
        size = f"{(self.source_bytes or 0) / 1e9:,.0f} GB"
        start = f" + a {(self.start_bytes or 0) / 1e9:,.1f} GB start checkpoint" if self.start_bytes else ""
        node = f"~{self.node_minutes:.0f} min node start and image pull + " if self.node_minutes else ""
        moving = f"~{self.move_minutes:.0f} min moving it"
        return f"{size}{start} at the file system's {rate}: {node}{moving} = ~{self.minutes:.0f} min"


def fsx_bytes_per_s(storage_gib: int, mb_s_per_tib: int) -> float:
    """The file system's baseline throughput, bytes per second."""
    return fsx_write_bytes_per_s(storage_gib, mb_s_per_tib)


def staging_estimate(
    source: str,
    *,
    bytes_per_s: float,
    start: str = "",
    on_dataset_node: bool = True,
    sizes: Mapping[str, int] = PUBLIC_SOURCE_BYTES,
) -> StagingEstimate:
    """The estimate of a staging Job of ``source`` (and ``start``) at ``bytes_per_s``, from the
    bytes of each source in ``sizes`` (default: the table synth knows; ``make doctor`` passes the
    sizes it reads from S3)."""
    size = sizes.get(source)
    start_size = sizes.get(start) if start.startswith("s3://") else None
    unknown = size is None or (start.startswith("s3://") and start_size is None)
    moved = None
    if not unknown:
        assert size is not None
        total: float = SHARD_PASSES * size
        if start_size:
            total += START_PASSES * start_size + START_WEIGHTS_SHARE * start_size
        moved = total / bytes_per_s / 60
    node = NODE_LAUNCH_MINUTES + pull_minutes() if on_dataset_node else 0.0
    return StagingEstimate(source, size, start_size, node, moved, bytes_per_s)
