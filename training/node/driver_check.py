"""Before anything else in a training pod: is the node's Neuron driver one the image's Neuron
runtime works with? One line and exit code :data:`MISMATCH_EXIT_CODE` when it is not, instead of
``nrt_init()`` failing after the dataset wait and a 15-minute precompile.

    python -m training.node.driver_check [--driver_version_file PATH] [--runtime_version VERSION]

* The driver: ``/sys/module/neuron/version``. Neuron does not document it; Linux exposes a
  module's ``MODULE_VERSION`` there (``kernel/params.c``, the ``version`` attribute of
  ``/sys/module/<name>``), and the driver declares it (aws-neuron-driver ``neuron_module.c``
  ``MODULE_VERSION``, equal to its dkms ``PACKAGE_VERSION``). The Neuron runtime itself reads it
  (``ndl_get_version``). ``/sys`` is the host's in an unprivileged container; ``modinfo`` would
  need the host's ``/lib/modules``, which the container does not have.
* The runtime: the image's ``aws-neuronx-runtime-lib`` package, which the DLC installs with apt
  (``dpkg-query -W -f '${Version}' aws-neuronx-runtime-lib``, e.g. ``2.31.24.0-0b044f4ce``).
* The supported pair: :data:`trainium_job.neuron_stack.NEURON_STACK` (its runtime and the driver
  range it needs).

Unreadable versions, or a runtime other than the table's (an image built from another
``BASE_IMAGE``), print a ``warning:`` line and pass: the check stops only a pair it knows to fail.
Standard library only.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from trainium_job.exit_codes import DRIVER_EXIT_CODE
from trainium_job.neuron_stack import NEURON_STACK, NeuronStack, version_tuple

DRIVER_VERSION_FILE = "/sys/module/neuron/version"
RUNTIME_PACKAGE = "aws-neuronx-runtime-lib"
#: Exit code of a known-bad driver/runtime pair (EX_CONFIG of sysexits.h: a configuration error).
MISMATCH_EXIT_CODE = DRIVER_EXIT_CODE


def read_driver_version(path: str | Path = DRIVER_VERSION_FILE) -> str | None:
    """The node's Neuron driver version, or None when the file is absent or not a version."""
    try:
        text = Path(path).read_text(encoding="ascii", errors="replace").strip()
        version_tuple(text)
    except (OSError, ValueError):
        return None
    return text


def read_runtime_version(package: str = RUNTIME_PACKAGE) -> str | None:
    """The image's Neuron runtime package version from dpkg, or None without dpkg or the package."""
    try:
        done = subprocess.run(
            ["dpkg-query", "-W", "-f", "${Version}", package], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = done.stdout.strip()
    if done.returncode != 0:
        return None
    try:
        version_tuple(text)
    except ValueError:
        return None
    return text


def verdict(driver: str | None, runtime: str | None, stack: NeuronStack = NEURON_STACK) -> tuple[bool, str]:
    """(ok, the one line to print) for a driver and runtime version."""
    if driver is None:
        return True, (
            f"warning: Neuron driver version unreadable ({DRIVER_VERSION_FILE}); skipping the driver check "
            f"(the image's runtime needs a driver {stack.driver_range})"
        )
    if runtime is None:
        return True, f"warning: {RUNTIME_PACKAGE} version unreadable (dpkg-query); skipping the driver check"
    if not stack.is_runtime(runtime):
        return True, (
            f"warning: the image's Neuron runtime {runtime} is not trainium_job/neuron_stack.py's "
            f"{stack.runtime_lib}: its driver range is unknown; driver {driver} not checked"
        )
    if stack.supports_driver(driver):
        return True, f"Neuron driver {driver} and runtime {runtime}: a supported pair"
    return False, (
        f"error: the node's Neuron driver {driver} does not run the image's Neuron runtime {runtime} "
        f"(it needs a driver {stack.driver_range}; trainium_job/neuron_stack.py): pin the Trainium nodes "
        "to an EKS Neuron AMI release with such a driver (trainium_ami_release_version, unset = the "
        "platform's default) and redeploy"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m training.node.driver_check", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--driver_version_file", default=DRIVER_VERSION_FILE, help="where the driver version is"
    )
    parser.add_argument("--runtime_version", default=None, help="the runtime version (default: from dpkg)")
    args = parser.parse_args(argv)
    runtime = args.runtime_version if args.runtime_version is not None else read_runtime_version()
    ok, line = verdict(read_driver_version(args.driver_version_file), runtime)
    print(line, file=sys.stdout if ok else sys.stderr)
    return 0 if ok else MISMATCH_EXIT_CODE


if __name__ == "__main__":
    sys.exit(main())
