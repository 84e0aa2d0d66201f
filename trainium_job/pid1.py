"""Shell scripts that run as a container's PID 1 and stop at once on SIGTERM.

The kernel delivers to a PID 1 only the signals it has a handler for; bash has one for SIGTERM
only once the script sets a trap (an EXIT trap too), and runs a trap only after its foreground
command has ended. The training container's script had none: a pod deleted while it waited for
the dataset or precompiled ignored the kubelet's SIGTERM until the SIGKILL a grace period later,
and the precompile's trial run was never told (found by the offline rehearsal,
``tests/rehearsal``). A script sets the trap of :data:`STOP_ON_SIGTERM` and runs each long command
through :func:`background`.
"""

from __future__ import annotations

#: Shell line: on SIGTERM pass the signal on to the commands in flight (``jobs -p``: each
#: background job's first process; the rest of a pipeline ends on its closed input), wait for
#: every child to end, exit 143 (128 + SIGTERM), which also runs the script's EXIT trap.
STOP_ON_SIGTERM = "trap 'kill -TERM $(jobs -p) 2>/dev/null || true; wait || true; exit 143' TERM"


def background(command: str) -> str:
    """``command`` (a shell command or pipeline) run in the background and waited for, so that a
    SIGTERM reaches the script's trap at once. Its exit status is the command's (the pipeline's
    under ``pipefail``), so ``set -e`` still ends the script when it fails."""
    return f"{command} & wait $!"
