"""What ``cdk synth`` of the default platform costs against a bare aws-eks-v2 app, in CPU seconds.

    .venv/bin/python -m bench.bench_synth             # 3 pairs after one warm-up pair
    .venv/bin/python -m bench.bench_synth --pairs 5

The bare app (``bench/bare_app/app.py``: a VPC, a cluster with its kubectl layer, one managed
nodegroup, one Helm chart) is what any EKS app synthesizes; the difference is what the platform
adds (its constructs, cdk-nag's two packs, the image build context). Both run through the same CDK
CLI (node_modules) and the same venv, in turn (platform, bare, platform, bare, ...), and the
ratio is taken pair by pair, so a machine that slows down between pairs does not bias it. A run's
CPU is user + system time of the CLI and everything it starts (the app, the jsii kernel), from
``getrusage(RUSAGE_CHILDREN)``.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CDK = REPO / "node_modules" / ".bin" / "cdk"
VENV_BIN = REPO / ".venv" / "bin"
BARE_APP = Path(__file__).resolve().parent / "bare_app" / "app.py"
#: Left out of the synths' environment: with it (set on some build machines) no bytecode is
#: cached, so the platform would compile its ~150 modules from source on every run, which the
#: bare app's one module does not, and which a user's machine does once.
NOT_PASSED = frozenset({"PYTHONDONTWRITEBYTECODE"})


def commands(outdir: Path) -> dict[str, list[str]]:
    """The two synths, each into its own folder under ``outdir``."""
    synth = [str(CDK), "synth", "--quiet"]
    return {
        "platform": [*synth, "-o", str(outdir / "platform")],
        "bare": [*synth, "--app", f"{VENV_BIN / 'python'} {BARE_APP}", "-o", str(outdir / "bare")],
    }


def cpu_seconds(command: list[str]) -> tuple[float, float]:
    """(CPU, wall) seconds of ``command`` and every process it started; it must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    env = {k: v for k, v in os.environ.items() if k not in NOT_PASSED}
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"
    proc = subprocess.run(
        command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    if proc.returncode != 0:
        sys.exit(f"{' '.join(command)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3, help="counted pairs (default 3)")
    parser.add_argument("--dry-run", action="store_true", help="print the two commands and exit")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-synth-") as tmp:
        runs = commands(Path(tmp))
        if args.dry_run:
            for name, command in runs.items():
                print(f"{name}: {' '.join(command)}")
            return 0
        machine = platform.processor() or platform.machine()
        print(f"machine: {machine}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
        for command in runs.values():  # warm-up pair: caches, compiled bytecode
            cpu_seconds(command)
        ratios = []
        for pair in range(1, args.pairs + 1):
            (ours, ours_wall), (bare, bare_wall) = (cpu_seconds(c) for c in runs.values())
            ratios.append(ours / bare)
            print(
                f"pair {pair}: platform {ours:.2f} CPU-s ({ours_wall:.2f} s wall), "
                f"bare {bare:.2f} CPU-s ({bare_wall:.2f} s wall), ratio {ours / bare:.3f}"
            )
        print(f"median ratio {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
