"""Each configuration field's documentation, declared once beside the field and read from there.

A field is documented by the string literal right after it (an attribute docstring: what IDEs
show on hover). The class docstring's field list, what ``help()`` shows, is written from the same
declarations at import (:func:`with_field_docs`), and so is the configuration reference
(:mod:`trainium_eks.config.reference`). A field with no docstring of its own shares the one of the
field above it (``min_nodes``, ``desired_nodes`` and ``max_nodes`` share one).

Classes that still document their fields with ``#:`` comments above them (the job spec in
``trainium_job``) are read the same way: a class uses one style or the other.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import sys
import textwrap

__all__ = ["field_docs", "field_groups", "with_field_docs"]

#: Width of the field list in a generated class docstring.
_WIDTH = 100


def _class_node(cls: type) -> tuple[ast.ClassDef, list[str]] | None:
    """The class's definition in its module's source and the source's lines (None without source:
    an installation that ships byte code only)."""
    try:
        source = inspect.getsource(sys.modules[cls.__module__])
    except (OSError, TypeError, KeyError):
        return None
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef) and node.name == cls.__name__:
            return node, source.splitlines()
    return None


def _docstring(node: ast.stmt | None) -> str | None:
    if (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    ):
        return inspect.cleandoc(node.value.value)
    return None


def _comment_above(lines: list[str], lineno: int) -> str:
    above: list[str] = []
    index = lineno - 2
    while index >= 0 and lines[index].strip().startswith("#:"):
        above.insert(0, lines[index].strip().removeprefix("#:").strip())
        index -= 1
    return " ".join(above)


def field_docs(cls: type) -> dict[str, str]:
    """Each field of ``cls`` (declared in its own body) -> its documentation as one line: its
    attribute docstring, or the run of ``#:`` lines right above it; ``""`` for a field with
    neither (it shares the documentation of the field above it)."""
    found = _class_node(cls)
    if found is None:
        return {}
    node, lines = found
    docs: dict[str, str] = {}
    body = node.body
    for index, stmt in enumerate(body):
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        following = body[index + 1] if index + 1 < len(body) else None
        doc = _docstring(following)
        docs[stmt.target.id] = (
            " ".join(doc.split()) if doc is not None else _comment_above(lines, stmt.lineno)
        )
    return docs


def field_groups(cls: type) -> list[tuple[tuple[str, ...], str]]:
    """The fields of ``cls`` in declaration order, grouped by shared documentation:
    (names, documentation)."""
    docs = field_docs(cls)
    groups: list[tuple[tuple[str, ...], str]] = []
    for f in dataclasses.fields(cls):
        doc = docs.get(f.name, "")
        if doc or not groups:
            groups.append(((f.name,), doc))
        else:
            names, shared = groups[-1]
            groups[-1] = ((*names, f.name), shared)
    return groups


def with_field_docs(cls: type, *, fields_of: type | None = None) -> str:
    """``cls``'s docstring followed by a ``Fields:`` section listing every field with its
    documentation (from ``fields_of``'s declarations, default ``cls``'s), for ``help()``."""
    groups = field_groups(fields_of or cls)
    head = inspect.cleandoc(cls.__doc__ or "")
    if not groups or not any(doc for _, doc in groups):
        return head
    entries = [
        textwrap.fill(
            f"{', '.join(names)}: {doc}",
            width=_WIDTH,
            initial_indent="    ",
            subsequent_indent="        ",
            break_on_hyphens=False,
        )
        for names, doc in groups
    ]
    return "\n".join([head, "", "Fields (each documented where it is declared):", *entries])
