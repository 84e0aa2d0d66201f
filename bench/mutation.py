"""Mutation testing (mutmut 3, requirements-mutation.txt) of the modules whose verdicts cost money
or work, each against its own tests; numbers, not a test (`make mutation`, not part of CI).

    .venv-mutation/bin/python -m bench.mutation                    # every module of TARGETS
    .venv-mutation/bin/python -m bench.mutation build-responder    # some of them, by slug
    .venv-mutation/bin/python -m bench.mutation watchdog --max-children 1 --time-limit 600 --keep --json out.json

For each module a scratch copy of the working tree (the files git tracks or would track, as they
are now: uncommitted edits included) is made under ``--scratch``; the checkout is never touched.
The copy's pyproject.toml gets a ``[tool.mutmut]`` section naming the one file to mutate and the
module's tests, and mutmut runs there. Only top-level functions and methods are mutated (mutmut 3's
trampolines: module constants and decorated functions are not); ``functions`` narrows a module to
the functions named. What mutmut needs from this tree:

- ``source_paths`` are all of the project's packages, so that every import resolves to the copy
  under ``mutants/`` (mutmut removes the copy's root from ``sys.path``); ``only_mutate`` is the
  module's file, the other files are copied as they are.
- mutmut's copy walks ``os.walk`` without following links, so trainium_eks/_training and
  trainium_eks/_docker (links to training/ and docker/) would be missing: they are made beforehand
  as the same relative links inside ``mutants/``, so ``trainium_eks._training`` is the mutated copy
  too; the other top-level entries (docs, node_modules, .venv, ...) are links to the copy's.
- ``process_isolation = "forkserver"``: the default forks each mutant from the process that ran
  the tests for mutmut's statistics, where ``tests.support``'s in-process synth cache already
  holds the unmutated templates (a mutant seen only through them would survive). Each mutant is forked from a
  server that has imported, before any mutant is active, either the test modules (``collect``:
  on this machine collection is most of a test run's time) or only third-party modules
  (``import``, for tests that compute from the module at import: a ``collect`` run of the
  admission policy let 130 of 196 mutants "survive" that way). The mutants share the server's
  jsii kernel (one node process) one after another: run one at a time (``--max-children 1``).

Statuses are mutmut's (``mutmut.stats.status_by_exit_code``); the score is killed / (killed +
survived + timeout + suspicious), "no tests" (a function the module's tests never call) listed
apart. Each survivor's diff and line are printed; ``--keep`` leaves the copy for ``mutmut browse``.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: The project's packages: copied under mutants/ so that no import reaches the unmutated tree.
PACKAGES = ("trainium_eks", "training", "trainium_job", "stacks")
#: The links inside the packages, made again inside mutants/ (mutmut's copy does not follow them).
LINKS = {"trainium_eks/_training": "../training", "trainium_eks/_docker": "../docker"}
#: Third-party modules the fork server imports for the "import" warm-up (none of the project's).
PRELOAD = (
    "pytest",
    "torch",
    "boto3",
    "botocore",
    "aws_cdk",
    "constructs",
    "cdk_nag",
    "cel_expr_python",
    "yaml",
)
#: What mutmut copies itself into mutants/ (configuration.py: also_copy's defaults).
COPIED = {"tests", "pyproject.toml"}
KILLED = {"killed"}
ALIVE = {"survived", "timeout", "suspicious"}


@dataclass(frozen=True)
class Target:
    """A module, the tests that are its own, and what of it is mutated."""

    name: str
    source: str
    #: pytest arguments selecting the module's tests (files, ``-k``).
    tests: tuple[str, ...]
    #: Function names (mutmut's keys: ``x_name``, ``xǁClassǁmethod``) to mutate; empty: all.
    functions: tuple[str, ...] = ()
    #: Why the selection leaves tests of these files out, if it does.
    note: str = ""
    #: mutmut's ``forkserver_warmup``: "collect" imports the test modules once, before any mutant
    #: is active, so it is right only where they compute nothing of the module at import;
    #: "import" preloads only :data:`PRELOAD` (third-party), each mutant imports the rest (and
    #: gets 10 s more before mutmut calls it a timeout: its estimate counts the tests alone).
    warmup: str = "collect"
    #: Run each survivor again against the whole selection: mutmut ties a function to the tests
    #: that call it while they run, so a function the test modules call at import (a module
    #: constant of the tests) is tied to the first test alone, and its mutants "survive".
    recheck: bool = False


TARGETS = (
    Target(
        "node health verdicts",
        "training/node/health_check.py",
        ("tests/training/node/test_health_check.py", "-k", "not deadline_is_their_sum"),
        note="the deadline test reads run_tool.__defaults__, which mutmut's trampoline (*args, "
        "**kwargs) does not have: it fails unmutated",
    ),
    Target("resume table", "training/trainer/resume.py", ("tests/training/trainer/test_resume.py",)),
    Target(
        "build responder",
        "trainium_eks/images/build_responder.py",
        ("tests/trainium_eks/images/test_build_responder.py", "-k", "not template"),
        note="the template test compares the synthesized inline code with the file: mutmut's "
        "trampolined file is neither the same text nor under CloudFormation's 4096 characters",
    ),
    Target(
        "karpenter controller statements",
        "trainium_eks/nodes/karpenter.py",
        ("tests/contracts/test_karpenter.py", "-k", "controller_statements"),
        functions=("x_controller_statements",),
        note="the tests that build the statements without a synth; the template tests compare the "
        "same policy after two platform synths, too slow per mutant",
    ),
    Target(
        "node replacement role statements",
        "trainium_eks/nodes/health_checks.py",
        (
            "tests/trainium_eks/nodes/test_node_replacement_role.py",
            "tests/trainium_eks/nodes/test_health_checks.py",
            "-k",
            "replacement or terminat",
        ),
        functions=("x_terminate_conditions", "xǁNodeReplacementRoleǁ__init__"),
        note="the role built alone (test_node_replacement_role.py) and test_node_health.py's tests "
        "of the role and its conditions; its others synthesize platforms that build the role but "
        "look at other things",
        warmup="import",
    ),
    Target(
        "admission policy",
        "trainium_eks/nodes/health_checks.py",
        (
            "tests/trainium_eks/nodes/test_health_checks_policy.py",
            "tests/trainium_eks/nodes/test_health_checks.py::"
            "test_given_the_admission_policy_then_it_binds_node_updates_by_the_check_and_the_training_account",
        ),
        functions=("x_admission_policy",),
        note="the policy's tests (its CEL evaluated) and the one of test_node_health.py about it: "
        "every other test there synthesizes a platform, which also calls admission_policy",
        # test_node_health_policy.py builds POLICY at import
        warmup="import",
        recheck=True,
    ),
    Target("watchdog", "training/trainer/watchdog.py", ("tests/training/trainer/test_watchdog.py",)),
)


def _slug(name: str) -> str:
    return name.replace(" ", "-")


def _module(source: str) -> str:
    return source.removesuffix(".py").replace("/", ".")


def scratch_copy(destination: Path) -> None:
    """The working tree's files as git lists them (tracked and untracked, not ignored), links kept;
    the ignored environments (.venv, node_modules) as links to the checkout's."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        check=True,
        capture_output=True,
    ).stdout.split(b"\0")
    for raw in filter(None, listed):
        relative = raw.decode()
        source = REPO / relative
        if not source.is_symlink() and not source.exists():
            continue  # deleted in the working tree, not yet in the index
        target = destination / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target, follow_symlinks=False)
    for environment in (".venv", "node_modules"):
        if (REPO / environment).exists():
            (destination / environment).symlink_to(REPO / environment)


def _toml_list(values: tuple[str, ...] | list[str]) -> str:
    return json.dumps(list(values))  # a JSON array of strings is a TOML array


def configure(copy: Path, target: Target) -> None:
    """The ``[tool.mutmut]`` section (mutmut 3.8 configuration.py) and the prepared mutants/."""
    section = f"""
[tool.mutmut]
source_paths = {_toml_list(PACKAGES)}
only_mutate = {_toml_list([target.source])}
pytest_add_cli_args_test_selection = {_toml_list(target.tests)}
pytest_add_cli_args = ["-p", "no:cacheprovider"]
process_isolation = "forkserver"
forkserver_warmup = "{target.warmup}"
preload_modules_file = "mutmut-preload.txt"
timeout_constant = {1.0 if target.warmup == "collect" else 10.0}
use_git_change_detection = false
"""
    pyproject = copy / "pyproject.toml"
    text = pyproject.read_text()
    assert "[tool.mutmut]" not in text, "the project's own pyproject.toml has a mutmut section"
    pyproject.write_text(text + section)
    (copy / "mutmut-preload.txt").write_text("\n".join(PRELOAD) + "\n")
    mutants = copy / "mutants"
    mutants.mkdir()
    for entry in copy.iterdir():
        if entry.name in {*PACKAGES, *COPIED, "mutants"}:
            continue
        (mutants / entry.name).symlink_to(Path("..") / entry.name)
    for link, points_to in LINKS.items():
        (mutants / link).parent.mkdir(parents=True, exist_ok=True)
        (mutants / link).symlink_to(points_to)


def _function_lines(source: str, mutant: str) -> range:
    """The lines of the function (``x_name``) or method (``xǁClassǁname``) a mutant is of."""
    key = mutant.partition("__mutmut_")[0].rpartition(".")[2]
    cls, _, name = key[2:].rpartition("ǁ") if key.startswith("xǁ") else ("", "", key[2:])
    body = ast.parse(source).body
    if cls:
        body = next(n.body for n in body if isinstance(n, ast.ClassDef) and n.name == cls.strip("ǁ"))
    node = next(n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name)
    return range(node.lineno, (node.end_lineno or node.lineno) + 1)


def _survivor_line(copy: Path, source: str, mutant: str, diff: str) -> int | None:
    """The source line of the first line the mutant changes, looked for in its function."""
    removed = [
        line[1:].strip() for line in diff.splitlines() if line.startswith("-") and not line.startswith("---")
    ]
    text = (copy / source).read_text()
    lines = text.splitlines()
    span = _function_lines(text, mutant)
    for number in span:
        if removed and lines[number - 1].strip() == removed[0]:
            return number
    return None


@dataclass
class Result:
    target: Target
    counts: Counter
    survivors: list[dict]
    seconds: float
    copy: Path

    @property
    def score(self) -> float | None:
        alive = sum(self.counts[s] for s in ALIVE)
        killed = sum(self.counts[s] for s in KILLED)
        return killed / (killed + alive) if killed + alive else None


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "PATH": f"{REPO / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def run_target(
    target: Target, scratch: Path, max_children: int, mutmut: Path, time_limit_s: float | None
) -> Result:
    copy = scratch / f"{_slug(target.name)}-{time.strftime('%H%M%S')}"
    if copy.exists():
        shutil.rmtree(copy)
    copy.mkdir(parents=True)
    env = _env()
    scratch_copy(copy)
    configure(copy, target)
    names = [f"{_module(target.source)}.{function}__mutmut_*" for function in target.functions]
    started = time.monotonic()
    log = copy / "mutmut-run.log"
    with log.open("w") as out:
        run = subprocess.Popen(
            [str(mutmut), "run", "--max-children", str(max_children), *names],
            cwd=copy,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            # A job started in the background has SIGINT ignored, and Python keeps it so: mutmut
            # must take it as Ctrl-C.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        try:
            returncode = run.wait(timeout=time_limit_s)
        except subprocess.TimeoutExpired:
            # As Ctrl-C: mutmut stops its workers and keeps each verdict it has (mutants/*.meta);
            # the rest stay "not checked".
            run.send_signal(signal.SIGINT)
            returncode = run.wait()
            stopped = True
        else:
            stopped = False
    seconds = time.monotonic() - started
    if returncode != 0 and not stopped:
        tail = log.read_text()[-3000:]
        raise SystemExit(f"{target.name}: mutmut run exited {returncode} in {copy}:\n{tail}")
    return collect(target, copy, mutmut, seconds)


def _killed_by_whole_selection(target: Target, copy: Path, env: dict[str, str], mutant: str) -> bool:
    """The module's whole selection run against ``mutant`` (the trampolines read the variable),
    for a survivor mutmut ran only the tests its statistics tied to the function (and a timeout,
    which may be the import mutmut's estimate leaves out; one that runs out here stays one)."""
    try:
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "--rootdir=.",
                "-x",
                "-q",
                "-p",
                "no:cacheprovider",
                *target.tests,
            ],
            cwd=copy / "mutants",
            env={**env, "MUTANT_UNDER_TEST": mutant},
            capture_output=True,
            timeout=180,
        )
    except subprocess.TimeoutExpired:
        return False
    return run.returncode not in (0, 5)


def collect(target: Target, copy: Path, mutmut: Path, seconds: float = 0.0) -> Result:
    """The verdicts mutmut recorded in ``copy`` (also of a run stopped early), survivors' diffs."""
    module = _module(target.source)
    env = _env()
    listed = subprocess.run(
        [str(mutmut), "results", "--all", "true"],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    # "    <mutant>: <status>" per mutant (mutmut 3.8 __main__.results)
    statuses = {
        name.strip(): status.strip()
        for name, _, status in (line.partition(": ") for line in listed.splitlines() if "__mutmut_" in line)
        if not target.functions
        or any(name.strip().startswith(f"{module}.{f}__mutmut_") for f in target.functions)
    }
    if target.recheck:
        for name, status in sorted(statuses.items()):
            if status in ("survived", "timeout") and _killed_by_whole_selection(target, copy, env, name):
                statuses[name] = "killed"
    survivors = []
    for name, status in sorted(statuses.items()):
        if status in KILLED or status == "not checked":
            continue
        shown = subprocess.run(
            [str(mutmut), "show", name], cwd=copy, env=env, capture_output=True, text=True
        ).stdout
        diff = "\n".join(shown.splitlines()[1:])
        survivors.append(
            {
                "mutant": name,
                "status": status,
                "line": _survivor_line(copy, target.source, name, diff),
                "diff": diff,
            }
        )
    return Result(target, Counter(statuses.values()), survivors, seconds, copy)


def report(result: Result) -> None:
    counts = result.counts
    score = "n/a" if result.score is None else f"{result.score:.1%}"
    print(
        f"   mutants {sum(counts.values())}, killed {counts['killed']}, survived {counts['survived']}, "
        f"timeout {counts['timeout']}, suspicious {counts['suspicious']}, no tests {counts['no tests']}, "
        f"not checked {counts['not checked']}, score {score} ({result.seconds:.0f} s)",
        flush=True,
    )
    for survivor in result.survivors:
        print(f"   -- {survivor['status']}: {result.target.source}:{survivor['line']} {survivor['mutant']}")
        print("      " + survivor["diff"].replace("\n", "\n      "))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("only", nargs="*", help="targets by name or slug (default: all)")
    parser.add_argument("--max-children", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--scratch", type=Path, default=Path("/tmp/trainium-eks-mutation"))
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument(
        "--time-limit", type=float, help="seconds per module; then mutmut is stopped, the rest not checked"
    )
    parser.add_argument("--keep", action="store_true", help="leave each scratch copy (mutmut browse)")
    args = parser.parse_args(argv)
    mutmut = Path(sys.executable).parent / "mutmut"
    if not mutmut.exists():
        parser.error(
            f"no mutmut beside {sys.executable}: run it with .venv-mutation/bin/python (make mutation)"
        )
    chosen = [t for t in TARGETS if not args.only or t.name in args.only or _slug(t.name) in args.only]
    if not chosen:
        parser.error(f"no target named {args.only}; targets: {[_slug(t.name) for t in TARGETS]}")
    results = []
    for target in chosen:
        print(f"== {target.name}: {target.source} against {' '.join(target.tests)}", flush=True)
        result = run_target(target, args.scratch, args.max_children, mutmut, args.time_limit)
        results.append(result)
        report(result)
        if not args.keep:
            shutil.rmtree(result.copy)
    if args.json:
        args.json.write_text(
            json.dumps(
                [
                    {
                        "target": r.target.name,
                        "source": r.target.source,
                        "tests": list(r.target.tests),
                        "functions": list(r.target.functions),
                        "counts": dict(r.counts),
                        "score": r.score,
                        "seconds": round(r.seconds),
                        "survivors": r.survivors,
                    }
                    for r in results
                ],
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
