"""Files on the shared file system written whole: a reader sees the old content or the new, never
half of it, whichever pod writes. Standard library only."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_whole(path: Path, text: str) -> None:
    """``text`` into ``path`` through a file of its own beside it, renamed over it. The temporary
    name is random, not the process's PID: every pod's program is PID 1 of its own namespace, so
    two pods writing the same file at once would share a PID-named temporary file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.replace(partial, path)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
