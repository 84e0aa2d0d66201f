"""``python -m trainium_job.pod_program '<description JSON>'``: the training container's command."""

from __future__ import annotations

import sys

from .description import DescriptionError, check, loads
from .program import Pod, Program, install


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m trainium_job.pod_program '<job description JSON>'", file=sys.stderr)
        return 2
    try:
        description = loads(args[0])
        check(description)
    except DescriptionError as e:
        print(f"pod program: {e}", file=sys.stderr)
        return 2
    program = Program(description, Pod.from_environment())
    install(program)
    if description.metrics_port is not None:
        program.metrics.serve(description.metrics_port)
    return program.run()


if __name__ == "__main__":
    sys.exit(main())
