"""What ``cdk synth`` of the default platform costs against a bare aws-eks-v2 app, in CPU seconds.

    .venv/bin/python -m bench.bench_synth             # 3 rounds after one warm-up round
    .venv/bin/python -m bench.bench_synth --pairs 5
    .venv/bin/python -m bench.bench_synth --tree /tmp/before   # another checkout's synth in each round too

The bare app (``bench/bare_app/app.py``: a VPC, a cluster with its kubectl layer, one managed
nodegroup, one Helm chart) is what any EKS app synthesizes; the difference is what the platform
adds (its constructs, cdk-nag's two packs, the image build context). Both run through the same CDK
CLI (node_modules) and the same venv, in turn (platform, bare, platform, bare, ...), and the
ratio is taken pair by pair, so a machine that slows down between pairs does not bias it. A run's
CPU is user + system time of the CLI and everything it starts (the app, the jsii kernel), from
``getrusage(RUSAGE_CHILDREN)``. ``--tree`` adds another checkout's platform (a worktree of an
earlier commit, with ``.venv`` and ``node_modules`` beside its ``cdk.json``) to every round, so a
change's before and after are measured against the same bare runs.
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
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CDK = REPO / "node_modules" / ".bin" / "cdk"
VENV_BIN = REPO / ".venv" / "bin"
BARE_APP = Path(__file__).resolve().parent / "bare_app" / "app.py"
#: Left out of the synths' environment: with it (set on some build machines) no bytecode is
#: cached, so the platform would compile its ~150 modules from source on every run, which the
#: bare app's one module does not, and which a user's machine does once.
NOT_PASSED = frozenset({"PYTHONDONTWRITEBYTECODE"})


def commands(outdir: Path, trees: Sequence[Path] = ()) -> dict[str, tuple[list[str], Path]]:
    """The synths of one round, each into its own folder under ``outdir``: name -> (argv, the
    folder it runs in, whose ``cdk.json`` names the app)."""
    synth = [str(CDK), "synth", "--quiet"]
    runs = {"platform": ([*synth, "-o", str(outdir / "platform")], REPO)}
    for n, tree in enumerate(trees, start=1):
        runs[f"tree {n}"] = ([*synth, "-o", str(outdir / f"tree-{n}")], tree)
    runs["bare"] = ([*synth, "--app", f"{VENV_BIN / 'python'} {BARE_APP}", "-o", str(outdir / "bare")], REPO)
    return runs


def cpu_seconds(command: list[str], cwd: Path = REPO) -> tuple[float, float]:
    """(CPU, wall) seconds of ``command`` and every process it started; it must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    env = {k: v for k, v in os.environ.items() if k not in NOT_PASSED}
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"
    proc = subprocess.run(
        command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    if proc.returncode != 0:
        sys.exit(f"{' '.join(command)} in {cwd} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3, help="counted rounds (default 3)")
    parser.add_argument(
        "--tree", type=Path, action="append", default=[], help="another checkout's platform, timed too"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the commands and exit")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-synth-") as tmp:
        runs = commands(Path(tmp), [tree.resolve() for tree in args.tree])
        if args.dry_run:
            for name, (command, cwd) in runs.items():
                print(f"{name}: (in {cwd}) {' '.join(command)}")
            return 0
        machine = platform.processor() or platform.machine()
        print(f"machine: {machine}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
        for name, tree in zip((n for n in runs if n.startswith("tree")), args.tree, strict=True):
            print(f"{name}: {tree}")
        for command, cwd in runs.values():  # warm-up round: caches, compiled bytecode
            cpu_seconds(command, cwd)
        ratios: dict[str, list[float]] = {name: [] for name in runs if name != "bare"}
        for pair in range(1, args.pairs + 1):
            measured = {name: cpu_seconds(command, cwd) for name, (command, cwd) in runs.items()}
            bare, bare_wall = measured["bare"]
            parts = []
            for name in ratios:
                cpu, wall = measured[name]
                ratios[name].append(cpu / bare)
                parts.append(f"{name} {cpu:.2f} CPU-s ({wall:.2f} s wall, ratio {cpu / bare:.3f})")
            print(f"pair {pair}: {', '.join(parts)}, bare {bare:.2f} CPU-s ({bare_wall:.2f} s wall)")
        for name, values in ratios.items():
            print(
                f"median ratio{'' if name == 'platform' else f' ({name})'} {statistics.median(values):.3f} "
                f"(min {min(values):.3f}, max {max(values):.3f})"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
