"""How a torchrun worker program ends: its process groups left up, the process ended by ``os._exit``.

A gloo process group runs its collectives on threads of its own (``pt_gloo_runloop``), and each
such thread drops its reference to a finished collective a moment after the caller has seen it
finish. When that collective's tensor was made in Python (the loss mean, the stop agreement's
flag, the fabric check's buffer), the drop takes the GIL. ``ProcessGroupGloo``'s destructor joins
those threads, and it runs with the GIL held by whoever frees the group's last reference: the
end of ``destroy_process_group``, a DDP module (its reducer holds the group) freed after it, or
the interpreter's own teardown. If a thread has not yet dropped its collective by then, both
wait for each other forever. torch 2.13 gives ``ProcessGroupGloo`` no ``shutdown`` that would stop
the threads first (``destroy_process_group`` only drops references); the hang is known upstream
(pytorch/pytorch#75097, open: "destroy_process_group() has a certain probability of hangs").

Found by the offline rehearsal under load (issue 26): about one precompile trial in ten never
ended. py-spy of the one rank left: its main thread in ``~Reducer -> ~ProcessGroupGloo ->
std::thread::join`` as ``train`` returned, a ``pt_gloo_runloop`` thread in ``~AsyncWork ->
decref_pyobject -> gil_scoped_acquire``; the other three ranks had exited 0, so both torchrun
agents waited on it (one in its exit barrier) until the rehearsal gave up.

So a worker never frees a process group: the groups stay in ``torch.distributed``'s registry,
and :func:`run_worker` ends the process with the program's exit code through ``os._exit`` once
what it wrote is flushed. No destructor runs, so nothing joins a thread; the kernel closes the
sockets and device files as for any exit. Files the programs write are closed before they
return (checkpoints and metrics durably, the step log per line, TensorBoard's writer).
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from collections.abc import Callable
from typing import NoReturn

#: The shell's code for a process ended by SIGINT (128 + 2), what Python exits with on an
#: uncaught KeyboardInterrupt.
INTERRUPTED_EXIT_CODE = 130


def exit_code(main: Callable[[], int]) -> int:
    """``main()``'s exit code, as ``sys.exit(main())`` would end the process: a ``SystemExit``'s
    code (None 0, an int itself, anything else printed to stderr and 1), 130 on
    KeyboardInterrupt, 1 with the traceback on stderr for any other exception."""
    try:
        return main()
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        print(e.code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        traceback.print_exc()
        return INTERRUPTED_EXIT_CODE
    except BaseException:
        traceback.print_exc()
        return 1


def end_process(code: int) -> NoReturn:
    """Flush the log handlers and the standard streams, then end the process with ``code``
    without running a destructor, an atexit handler or a thread join."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken stream: nothing more can be said
            pass
    os._exit(code)


def run_worker(main: Callable[[], int]) -> NoReturn:
    """The ``__main__`` of a worker program: ``main()``, then :func:`end_process` with its code."""
    end_process(exit_code(main))
