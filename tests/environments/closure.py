"""What an entry point loads, and which installed distribution each loaded module comes from.

An entry point (the CDK app, the construct library, an image's module) is imported in a fresh
interpreter; every module it loads that is neither the standard library nor this repository's own
code is mapped to the distribution whose RECORD lists its file. That distribution must be in the
closure (the declared requirements and what they require, extras left out) of the requirements the
entry point's user installs: ``requirements.txt`` for ``make synth``, the package's own metadata
for ``pip install`` of the wheel, ``training/requirements.txt`` on top of the base image's frozen
stack for the training image, the two packages ``docker/tensorboard.Dockerfile`` installs for the
tools image.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import sysconfig
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
#: This repository's own top-level packages and modules: never a distribution's.
FIRST_PARTY = frozenset({"app", "stacks", "trainium_eks", "trainium_job", "training", "tests", "bench"})

#: Distributions a dependency imports only if present, with a fallback of its own: loaded here
#: because the development venv has them, absent (and not needed) where the user's install lacks them.
OPTIONAL_IMPORTS: dict[str, str] = {
    # botocore 1.44.8 botocore/httpsession.py L95-100: ``try: from certifi import where`` / ``except
    # ImportError:`` falls back to its own DEFAULT_CA_BUNDLE; botocore's metadata does not require it.
    "certifi": "botocore",
    # kubernetes 36.0.3 kubernetes/dynamic/client.py L24-34: ``try: import kubernetes_validate`` /
    # ``except ImportError:`` (validation off, a stand-in error class); not in its metadata.
    "kubernetes-validate": "kubernetes",
    # oauthlib 4.0.1 oauthlib/signals.py L6-13 (required by requests-oauthlib, by kubernetes):
    # ``try: from blinker import Namespace`` / ``except ImportError:`` no-op signals.
    "blinker": "oauthlib",
    # jsonschema 4.26.0 jsonschema/_format.py L455-456 (required by kubernetes-validate):
    # ``with suppress(ImportError): import jsonpointer`` (the json-pointer format unchecked).
    "jsonpointer": "jsonschema",
}

#: Run in a fresh interpreter: import the modules named in argv and print, as JSON, every module
#: that was not loaded before (the interpreter's own start-up, .pth hooks included, is left out),
#: with its file.
_PROBE = """
import importlib, json, sys
before = set(sys.modules)
for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps({n: getattr(m, "__file__", None) for n, m in list(sys.modules.items()) if n not in before}))
"""


def requirement_names(path: Path) -> set[str]:
    """Canonical names a requirements file installs (``-r`` files followed; pins and markers dropped)."""
    names: set[str] = set()
    lines = []
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line.startswith(("-r ", "--requirement ")):
            names |= requirement_names(path.parent / line.split(maxsplit=1)[1])
        elif line and not line.startswith("-"):
            lines.append(line)
    return names | names_of(lines)


def names_of(requirements: Iterable[str]) -> set[str]:
    """Canonical names of requirement strings (``pkg==1.0``, ``pkg[extra]>=2; marker``)."""
    return {canonicalize_name(Requirement(line).name) for line in requirements}


def closure(names: Iterable[str]) -> frozenset[str]:
    """``names`` and everything their installed metadata requires, transitively, without extras."""
    seen: set[str] = set()
    todo = [canonicalize_name(n) for n in names]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue  # declared but not installed here: nothing of it can be loaded either
        for line in requires:
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            todo.append(canonicalize_name(req.name))
    return frozenset(seen)


@cache
def _owners() -> dict[str, str]:
    """Absolute file path -> canonical name of the installed distribution whose RECORD lists it."""
    owners: dict[str, str] = {}
    for dist in metadata.distributions():
        name = canonicalize_name(dist.metadata["Name"])
        for file in dist.files or ():
            owners[str(Path(dist.locate_file(file)).resolve())] = name
    return owners


def loaded_modules(modules: Sequence[str], *, cwd: Path = REPO) -> dict[str, str | None]:
    """Module name -> file of every module importing ``modules`` loads, in a fresh interpreter."""
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, *modules], cwd=cwd, capture_output=True, text=True, timeout=300
    )
    if proc.returncode != 0:
        raise RuntimeError(f"importing {' '.join(modules)} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


@dataclass(frozen=True)
class Origin:
    """Where one loaded module comes from."""

    module: str
    distribution: str | None  # None: the standard library, this repository, or no file at all

    @property
    def first_party(self) -> bool:
        return self.module.split(".", 1)[0] in FIRST_PARTY


def origins(loaded: dict[str, str | None]) -> list[Origin]:
    """Each loaded module with its distribution (``None`` for stdlib, first-party and built-ins)."""
    owners = _owners()
    out = []
    for name, file in sorted(loaded.items()):
        top = name.split(".", 1)[0]
        if top in sys.stdlib_module_names or top in FIRST_PARTY or file is None or _in_stdlib(file):
            out.append(Origin(name, None))
            continue
        dist = owners.get(str(Path(file).resolve()))
        if dist is None and not _inside(Path(file), REPO):
            raise LookupError(f"{name} ({file}) belongs to no installed distribution")
        out.append(Origin(name, dist))
    return out


def _in_stdlib(file: str) -> bool:
    """A file of the interpreter's own library (``_sysconfigdata_*`` and the like), not of a venv."""
    paths = sysconfig.get_paths()
    stdlib = {Path(paths["stdlib"]), Path(paths["platstdlib"])}
    return any(_inside(Path(file), folder) for folder in stdlib) and "site-packages" not in Path(file).parts


def _inside(path: Path, folder: Path) -> bool:
    return folder.resolve() in path.resolve().parents


def undeclared(loaded: dict[str, str | None], allowed: Iterable[str]) -> dict[str, list[str]]:
    """Distribution -> the modules it gave, for every distribution not in ``allowed``."""
    allow = {canonicalize_name(a) for a in allowed}
    # An optional import brings what it requires, which may import optionally in turn.
    while True:
        more = closure(o for o, importer in OPTIONAL_IMPORTS.items() if importer in allow) - allow
        if not more:
            break
        allow |= more
    found: dict[str, list[str]] = {}
    for origin in origins(loaded):
        if origin.distribution is not None and origin.distribution not in allow:
            found.setdefault(origin.distribution, []).append(origin.module)
    return found


def dockerfile_pip_names(dockerfile: Path) -> list[list[str]]:
    """The package names each ``grep -E '^(a|b|...)=='`` of a Dockerfile keeps, in order: of a pip
    freeze (the base image's frozen stack) or of training/requirements.txt (the tools image's)."""
    groups = re.findall(r"grep -i?E '\^\(([^)]*)\)==", dockerfile.read_text())
    return [group.split("|") for group in groups]
