"""``make integ``: deploy the integ app on a real account, let its assertion run, destroy it.

It prints the variant's review and cost estimate first and refuses to start without
``ACK_COST=yes`` in the environment. ``cdk deploy --all`` deploys the test stacks, then the
assertion stack, whose custom resource fails (and fails the deploy) when the probe's verdict is
not the expected one within its wait; ``cdk destroy --all`` then runs whatever happened, unless
``INTEG_KEEP=yes`` (to look at a failed run; destroy it later with the printed command).
``-c key=value`` arguments go to both commands (e.g. ``-c desired_nodes=4``).
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

from tests.integ.variant import cost_notice, integ_config
from tests.support import CDK_CLI, REPO
from trainium_eks.doctor.settings import parse_overrides, read_context

#: How the CLI runs the integ app (from the repository root).
APP = f"{REPO / '.venv' / 'bin' / 'python'} -m tests.integ.integ_trainium"


def commands(overrides: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """The deploy and destroy command lines."""
    context = [arg for key, value in overrides.items() for arg in ("-c", f"{key}={value}")]
    deploy = [str(CDK_CLI), "deploy", "--all", "--app", APP, "--require-approval", "never", *context]
    destroy = [str(CDK_CLI), "destroy", "--all", "--app", APP, "--force", *context]
    return deploy, destroy


def main(
    argv: Sequence[str] | None = None,
    *,
    env: Mapping[str, str] = os.environ,
    run: Callable[..., Any] = subprocess.run,
    out: TextIO = sys.stdout,
) -> int:
    parser = argparse.ArgumentParser(prog="make integ", description=__doc__.splitlines()[0])
    parser.add_argument("-c", "--context", action="append", default=[], metavar="KEY=VALUE")
    overrides = parse_overrides(parser.parse_args(argv).context)
    config = integ_config({**read_context(REPO), **overrides})
    print(cost_notice(config), file=out)
    deploy, destroy = commands(overrides)
    if env.get("ACK_COST") != "yes":
        print(
            "not started: this deploys real, billed resources. Run `make doctor` first, then "
            "`make integ ACK_COST=yes` to accept the cost above.",
            file=out,
        )
        return 2
    deployed = run(deploy, cwd=REPO).returncode
    if env.get("INTEG_KEEP") == "yes":
        print(f"kept (INTEG_KEEP=yes); destroy with: {shlex.join(destroy)}", file=out)
        return deployed
    destroyed = run(destroy, cwd=REPO).returncode
    print(
        f"integ: deploy and assertions {'passed' if deployed == 0 else 'FAILED'}; destroy exit {destroyed}",
        file=out,
    )
    return deployed or destroyed


if __name__ == "__main__":
    sys.exit(main())
