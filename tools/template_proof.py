"""The proof a restructuring keeps: every synthesized template byte for byte as it was.

    .venv/bin/python tools/template_proof.py snapshot DIR    # before the change (and after)
    .venv/bin/python tools/template_proof.py compare OLD NEW  # cmp of every file; exit 1 on a difference
    .venv/bin/python tools/template_proof.py changes OLD NEW  # what differs, resource by resource

A snapshot holds three sets: every configuration in ``tests.support.VARIANTS`` as synthesized
(``variants/``), the same with the image build context held to its Dockerfiles (``held/``: an edit
to ``training/`` or ``trainium_job/``, which the context ships and hashes into the asset and the
image tag, does not show there), and the default app's real ``cdk synth`` (``cdkout/``). The
``*.metadata.json`` files are left out of the comparison: they hold the jsii kernel's temporary
paths, which differ between two synths of the same tree.

``changes`` is for a change that means to alter templates: per template, the resources added,
removed and changed (logical ID and type; for a Kubernetes manifest, the objects in it by kind and
name), and the outputs, so each difference can be named as intended.
"""

from __future__ import annotations

import filecmp
import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PARTS = ("variants", "held", "cdkout")


def _hold_context() -> None:
    module = importlib.import_module("trainium_eks.images.training_image")
    dockerfiles = {name: module.DOCKER_DIR / name for name in (*module.DOCKERFILES, ".dockerignore")}
    module._context_files = lambda: dict(dockerfiles)  # type: ignore[attr-defined]


def _variants(out: Path, *, held: bool) -> None:
    """Each configuration in its own process's synthesis (``synth_app`` caches per process)."""
    args = [sys.executable, str(Path(__file__).resolve()), "variants", str(out)]
    subprocess.run([*args, "--held"] if held else args, cwd=REPO, check=True)


def _write_variants(out: Path, *, held: bool) -> None:
    sys.path.insert(0, str(REPO))
    if held:
        _hold_context()
    from tests.support import VARIANTS, synth_app

    for name, context in VARIANTS.items():
        folder = out / re.sub(r"[^a-z0-9.]+", "-", name)
        folder.mkdir(parents=True, exist_ok=True)
        for stack, template in synth_app(**context).items():
            (folder / f"{stack}.json").write_text(json.dumps(template, indent=1, sort_keys=True))


def snapshot(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    _variants(out / "variants", held=False)
    _variants(out / "held", held=True)
    subprocess.run(
        ["make", "-s", "cdk", f"ARGS=synth --quiet --output {out / 'cdkout'}"],
        cwd=REPO,
        check=True,
        capture_output=True,
    )
    print(json.dumps({"snapshot": str(out)}))


def _files(root: Path) -> list[str]:
    return sorted(
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file()
        # an asset directory's files: its name is their hash
        and not (len(p.relative_to(root).parts) > 1 and p.relative_to(root).parts[0].startswith("asset."))
        and not p.name.endswith((".metadata.json", ".lock"))
    )


def compare(old: Path, new: Path) -> int:
    differs = 0
    for part in PARTS:
        before, after = _files(old / part), _files(new / part)
        if before != after:
            print(f"{part}: file lists differ: {sorted(set(before) ^ set(after))}")
            differs += 1
        for name in sorted(set(before) & set(after)):
            if not filecmp.cmp(old / part / name, new / part / name, shallow=False):
                print(f"DIFFERS {part}/{name}")
                differs += 1
        print(f"{part}: {len(set(before) & set(after))} files compared")
    print("IDENTICAL" if not differs else f"NOT IDENTICAL ({differs})")
    return 1 if differs else 0


def _objects(resource: dict) -> dict[str, object]:
    """A Kubernetes manifest resource's objects by ``kind/namespace/name`` (tokens left as they are)."""
    manifest = resource.get("Properties", {}).get("Manifest")
    if not isinstance(manifest, str):
        return {}
    try:
        objects = json.loads(manifest)
    except json.JSONDecodeError:
        return {}
    return {
        f"{o.get('kind')}/{o.get('metadata', {}).get('namespace', '-')}/{o.get('metadata', {}).get('name')}": o
        for o in objects
        if isinstance(o, dict)
    }


def _template_changes(before: dict, after: dict) -> list[str]:
    lines = []
    old, new = before.get("Resources", {}), after.get("Resources", {})
    for lid in sorted(set(old) - set(new)):
        lines.append(f"  - {lid} ({old[lid]['Type']})")
    for lid in sorted(set(new) - set(old)):
        lines.append(f"  + {lid} ({new[lid]['Type']})")
    for lid in sorted(set(old) & set(new)):
        if old[lid] == new[lid]:
            continue
        keys = sorted(k for k in set(old[lid]) | set(new[lid]) if old[lid].get(k) != new[lid].get(k))
        lines.append(f"  ~ {lid} ({new[lid]['Type']}): {', '.join(keys)}")
        objects_before, objects_after = _objects(old[lid]), _objects(new[lid])
        for key in sorted(set(objects_before) | set(objects_after)):
            if objects_before.get(key) != objects_after.get(key):
                sign = "-" if key not in objects_after else "+" if key not in objects_before else "~"
                lines.append(f"      {sign} {key}")
    outputs_before, outputs_after = before.get("Outputs", {}), after.get("Outputs", {})
    for key in sorted(set(outputs_before) | set(outputs_after)):
        if outputs_before.get(key) != outputs_after.get(key):
            sign = "-" if key not in outputs_after else "+" if key not in outputs_before else "~"
            lines.append(f"  {sign} output {key}")
    return lines


def changes(old: Path, new: Path) -> int:
    """Print what differs in each template of the two snapshots; exit 1 if anything does."""
    differs = 0
    for part in PARTS:
        before, after = set(_files(old / part)), set(_files(new / part))
        for name in sorted(before ^ after):
            print(f"{part}/{name}: {'removed' if name in before else 'added'}")
            differs += 1
        for name in sorted(before & after):
            if not name.endswith(".json") or filecmp.cmp(old / part / name, new / part / name, shallow=False):
                continue
            lines = _template_changes(
                json.loads((old / part / name).read_text()), json.loads((new / part / name).read_text())
            )
            print(f"{part}/{name}:" + ("" if lines else " (formatting only)"))
            for line in lines:
                print(line)
            differs += 1
    print("IDENTICAL" if not differs else f"CHANGED ({differs} files)")
    return 1 if differs else 0


if __name__ == "__main__":
    match sys.argv[1:]:
        case ["snapshot", out]:
            snapshot(Path(out).resolve())
        case ["variants", out, *flags]:
            _write_variants(Path(out), held="--held" in flags)
        case ["compare", old, new]:
            sys.exit(compare(Path(old), Path(new)))
        case ["changes", old, new]:
            sys.exit(changes(Path(old), Path(new)))
        case _:
            sys.exit(__doc__)
