"""How a worker program ends (training.trainer.worker_exit): its exit code as ``sys.exit(main())``
would give it, its output flushed, and no teardown that could wait on a thread."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.training.conftest import REPO
from training.trainer.worker_exit import INTERRUPTED_EXIT_CODE, exit_code


def raises(error: BaseException):
    def main() -> int:
        raise error

    return main


@pytest.mark.parametrize(
    ("main", "code"),
    [
        (lambda: 0, 0),
        (lambda: 86, 86),
        (raises(SystemExit()), 0),
        (raises(SystemExit(2)), 2),  # argparse's usage error
        (raises(SystemExit("bad input")), 1),
        (raises(KeyboardInterrupt()), INTERRUPTED_EXIT_CODE),
        (raises(RuntimeError("boom")), 1),
    ],
)
def test_given_how_main_ends_then_the_exit_code_is_what_sys_exit_would_give(main, code):
    assert exit_code(main) == code


def test_given_an_uncaught_error_then_its_traceback_is_on_stderr(capsys):
    assert exit_code(raises(RuntimeError("boom"))) == 1
    assert "RuntimeError: boom" in capsys.readouterr().err


#: A worker whose normal exit would never end: a non-daemon thread that waits forever (the
#: interpreter joins it at exit, as ProcessGroupGloo's destructor joins gloo's threads).
_WORKER = textwrap.dedent(
    """
    import atexit, logging, sys, threading
    from training.trainer.worker_exit import run_worker

    def main():
        logging.basicConfig(level=logging.INFO, format="%(message)s")
        atexit.register(lambda: print("atexit handler ran", flush=True))
        threading.Thread(target=threading.Event().wait).start()
        sys.stdout.write("written, not flushed")
        logging.getLogger("worker").info("logged")
        return 3

    run_worker(main)
    """
)


def test_given_a_teardown_that_never_ends_then_the_worker_exits_at_once_with_its_output_and_code():
    done = subprocess.run(
        [sys.executable, "-c", _WORKER], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 3, done.stderr
    assert done.stdout == "written, not flushed"  # no atexit handler: no teardown ran
    assert done.stderr.strip() == "logged"
