"""The tree's shape, from the code's own imports: modules, packages, import edges, circles between
``trainium_eks``'s packages and between modules, edges up the layers, and the functions over 80 lines.

    python3 tools/structure.py            # the counts, the circles, the long functions
    python3 tools/structure.py --edges    # every edge too

Counted over app.py, stacks/, trainium_eks/, trainium_job/ and training/ (trainium_eks/_training is
the link to training/). An edge is one module importing another; ``from package import module``
counts the module.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOTS = ("app.py", "stacks", "trainium_eks", "trainium_job", "training")
LONG = 80
#: The layers, top first: a module may import its own layer and those below it, never one above
#: (the app composes stacks of the library's constructs, which ship the training code, which
#: shares the job contract).
LAYERS = ("app", "stacks", "trainium_eks", "training", "trainium_job")


def _module(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for root in ROOTS:
        top = REPO / root
        for path in [top] if top.is_file() else sorted(top.rglob("*.py")):
            if not {"_training", "_docker", "__pycache__"} & set(path.relative_to(REPO).parts):
                found[_module(path)] = path
    return found


def edges(mods: dict[str, Path]) -> set[tuple[str, str]]:
    def owner(name: str) -> str:
        name = name.replace("trainium_eks._training", "training", 1)
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name

    found = set()
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                targets = [f"{base}.{alias.name}" for alias in node.names]
            for target in targets:
                if (hit := owner(target)) and hit != name:
                    found.add((name, hit))
    return found


def unit(name: str) -> str:
    """A trainium_eks subpackage, or the top-level module or package, an edge belongs to."""
    parts = name.split(".")
    if parts[0] == "trainium_eks" and len(parts) > 1 and (REPO / "trainium_eks" / parts[1]).is_dir():
        return f"trainium_eks.{parts[1]}"
    return name if parts[0] == "trainium_eks" else parts[0]


def _in_circles(graph: dict[str, set[str]]) -> list[str]:
    """The nodes of ``graph`` that reach themselves."""

    def reaches(start: str) -> set[str]:
        seen: set[str] = set()
        todo = [start]
        while todo:
            for nxt in graph.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    return sorted(u for u in list(graph) if u in reaches(u))


def circles(found: set[tuple[str, str]]) -> list[str]:
    """The ``trainium_eks`` packages (and top-level units) on a circle of package-level edges."""
    graph: dict[str, set[str]] = defaultdict(set)
    for a, b in found:
        if unit(a) != unit(b):
            graph[unit(a)].add(unit(b))
    return _in_circles(graph)


def module_circles(found: set[tuple[str, str]]) -> list[str]:
    """The modules on a circle of imports, those under ``if TYPE_CHECKING:`` included."""
    graph: dict[str, set[str]] = defaultdict(set)
    for a, b in found:
        graph[a].add(b)
    return _in_circles(graph)


def upward(found: set[tuple[str, str]]) -> list[tuple[str, str]]:
    """The edges from a layer to one above it (:data:`LAYERS`)."""
    rank = {layer: n for n, layer in enumerate(LAYERS)}
    return sorted((a, b) for a, b in found if rank[b.split(".")[0]] < rank[a.split(".")[0]])


def long_functions(mods: dict[str, Path]) -> list[tuple[int, str]]:
    out = []
    for path in mods.values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1 if node.end_lineno else 0
                if lines > LONG:
                    out.append((lines, f"{path.relative_to(REPO)}:{node.lineno} {node.name}"))
    return sorted(out, reverse=True)


if __name__ == "__main__":
    mods = modules()
    found = edges(mods)
    packages = sum(1 for p in mods.values() if p.name == "__init__.py")
    print(f"modules {len(mods)}  packages {packages}  import edges {len(found)}")
    print(f"circles between packages: {circles(found) or 'none'}")
    print(f"modules on a circle of imports: {module_circles(found) or 'none'}")
    print(f"upward edges between layers: {upward(found) or 'none'}")
    for lines, where in long_functions(mods):
        print(f"{lines:4d} lines  {where}")
    if "--edges" in sys.argv:
        for a, b in sorted(found):
            print(f"{a} -> {b}")
