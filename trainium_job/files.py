"""Files on the shared file system written whole: a reader sees the old content or the new, never
half of it, whichever pod writes. Standard library only."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

#: Tries at a free temporary name (each a random one: a clash is all but impossible).
_NAME_TRIES = 10


def write_whole(path: Path, text: str) -> None:
    """``text`` into ``path`` through a file of its own beside it, renamed over it. The temporary
    name is random, not the process's PID: every pod's program is PID 1 of its own namespace, so
    two pods writing the same file at once would share a PID-named temporary file. The file gets
    the mode ``open()`` gives a new file (0666 less the umask): pods of other users read it (the
    job's submitter, as nobody, reads the staging pod's failed marker and the gang's spend
    records), where ``tempfile.mkstemp``'s 0600 would leave it to its writer."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(_NAME_TRIES):
        partial = path.parent / f".{path.name}.{secrets.token_hex(8)}"
        try:
            fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(f"no free temporary name beside {path}")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
