"""The integ app's snapshot: its synthesized templates, committed, compared offline in ``make test``.

integ-runner's convention is a ``<test file>.snapshot`` directory next to the test, compared with
a fresh synthesis, asset hashes ignored (its ``diffAssets`` default). The pinned aws-cdk-lib writes
cloud assembly schema 55, and the newest integ-runner on npm (2.197.10) reads 53 at most, so this
module does that comparison itself with the project's CDK CLI (the one ``make integ`` deploys
with): the ``*.template.json`` files and ``integ.json``, with what follows from the training code
replaced by placeholders, so that only a change of the templates themselves shows:

- asset hashes (64 hex) and the image tags cut from them (``training-<16 hex>``);
- the content-named jobs' digests (``trainium_job.naming``: 8 hex of a job rendered with its
  image tag, in the job name and its construct IDs: ``Job<digest>``, and the training job's
  ``SubmissionManifest<digest>`` and ``SubmissionSubmitter<digest>``) and the logical-ID suffix
  derived from that construct path; the training job's submission key (its
  ``trainium-eks/submission`` annotation: 8 hex of the submitter, whose tools image holds the
  training code); the prune labels (construct addresses);
- the ``salt`` integ-tests gives each assertion (the synth time, so that it runs on every deploy).

``python -m tests.integ.snapshot --update`` rewrites the snapshot (``make integ-snapshot``).
"""

from __future__ import annotations

import argparse
import difflib
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.support import CDK_CLI, REPO, cli_env

SNAPSHOT = Path(__file__).with_name("integ_trainium.py.snapshot")
APP = "python -m tests.integ.integ_trainium"
#: Files of the cloud assembly the snapshot holds.
SNAPSHOT_GLOBS = ("*.template.json", "integ.json")

_ASSET_HASH = re.compile(r"\b[0-9a-f]{64}\b")
_IMAGE_TAG = re.compile(r"\b(training|tensorboard)-[0-9a-f]{16}\b")
_JOB_DIGEST = re.compile(r"(?:Job|SubmissionManifest|SubmissionSubmitter)([0-9a-f]{8})(?=[0-9A-F]{8}\b|\b)")
_SUBMISSION_KEY = re.compile(r'(trainium-eks/submission[\\"]+:[\\"]+)[0-9a-f]{8}\b')
_PRUNE_LABEL = re.compile(r"aws\.cdk\.eks/prune-[0-9a-f]{42}")
_SALT = re.compile(r'"salt": "[0-9]+"')


def normalize(files: dict[str, str]) -> dict[str, str]:
    """``files`` (name -> text) with the placeholders of the module docstring. A job digest is
    learnt from its construct ID and replaced in every file (the probe names the job too)."""
    digests: dict[str, str] = {}
    for name in sorted(files):
        for digest in _JOB_DIGEST.findall(files[name]):
            digests.setdefault(digest, f"<digest-{len(digests) + 1}>")
    normalized = {}
    for name, text in files.items():
        text = _ASSET_HASH.sub("<asset-hash>", text)
        text = _IMAGE_TAG.sub(r"\1-<image-tag>", text)
        text = _PRUNE_LABEL.sub("aws.cdk.eks/prune-<address>", text)
        text = _SALT.sub('"salt": "<synth time>"', text)
        text = _SUBMISSION_KEY.sub(r"\1<submission>", text)
        for digest, placeholder in digests.items():
            text = re.sub(rf"{digest}(?:[0-9A-F]{{8}}\b)?", placeholder, text)
        normalized[name] = text
    return normalized


def synthesize(outdir: Path) -> dict[str, str]:
    """File name -> normalized text of the snapshot files of a fresh ``cdk synth`` of the app."""
    env = cli_env()
    python = str(REPO / ".venv" / "bin" / "python")
    proc = subprocess.run(
        [
            str(CDK_CLI),
            "synth",
            "--quiet",
            "--app",
            APP.replace("python", python, 1),
            "--output",
            str(outdir),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"cdk synth of the integ app failed:\n{proc.stderr[-4000:]}")
    return normalize(
        {path.name: path.read_text() for pattern in SNAPSHOT_GLOBS for path in sorted(outdir.glob(pattern))}
    )


def committed() -> dict[str, str]:
    return {
        path.name: path.read_text() for pattern in SNAPSHOT_GLOBS for path in sorted(SNAPSHOT.glob(pattern))
    }


def differences(fresh: dict[str, str], saved: dict[str, str]) -> str:
    """A unified diff of the snapshot files (empty when they agree)."""
    lines: list[str] = []
    for name in sorted(set(fresh) | set(saved)):
        lines += difflib.unified_diff(
            saved.get(name, "").splitlines(),
            fresh.get(name, "").splitlines(),
            f"snapshot/{name}",
            f"synth/{name}",
            lineterm="",
        )
    return "\n".join(lines)


def update(fresh: dict[str, str]) -> None:
    shutil.rmtree(SNAPSHOT, ignore_errors=True)
    SNAPSHOT.mkdir()
    for name, text in fresh.items():
        (SNAPSHOT / name).write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="rewrite the committed snapshot")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as outdir:
        fresh = synthesize(Path(outdir))
    if args.update:
        update(fresh)
        print(f"snapshot written: {SNAPSHOT.relative_to(REPO)}")
        return 0
    diff = differences(fresh, committed())
    print(diff or "snapshot unchanged")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
