"""Debian's Prometheus tools (``make prometheus``: the ``prometheus`` package, server and promtool
2.42) for the tests, and a reader of the metric names in a PromQL expression.

promtool 2.42 reads plain rule files (``groups:``), not PrometheusRule objects: the tests write the
object's ``spec`` to a file first. Its unit tests need ``interval`` in every test group and
``exp_annotations`` matching the alert's annotations exactly (docs/configuration/unit_testing_rules.md
at v2.42.0, L20-70 and L120).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

#: Grafana's own variables in a panel query, with what the tests put in their place.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$training_job": ".*", "$node": "n1"}
_KEYWORDS = {
    "and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool",
    "sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk", "quantile", "count_values",
    "group", "inf", "nan",
}  # fmt: skip


def tool(name: str) -> str:
    """The binary's path; FAILS (does not skip) without it: these checks are required."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(
            f"{name} is not installed: run `make prometheus` or `apt-get install -y prometheus` "
            "(Debian's package has the server and promtool)",
            pytrace=False,
        )
    return path


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tool("promtool"), *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def write_rules(path: Path, groups: list[dict[str, Any]]) -> Path:
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    return path


def check_expressions(tmp_path: Path, exprs: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``promtool check rules`` on one recording rule per expression: each must parse in 2.42."""
    rules = [{"record": f"check:{i}", "expr": e} for i, e in enumerate(exprs.values())]
    write_rules(tmp_path / "exprs.yaml", [{"name": "exprs", "rules": rules}])
    return promtool("check", "rules", "exprs.yaml", cwd=tmp_path)


def metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression reads: identifiers outside label matchers, grouping
    clauses, strings and offsets that are not functions or keywords, plus ``__name__`` matchers' literals."""
    names = set(re.findall(r'__name__=~?"([a-zA-Z_:][a-zA-Z0-9_:|()]*)"', expr))
    expanded: set[str] = set()
    for name in names:
        match = re.fullmatch(r"([a-z_]*)\(([a-z_|]+)\)([a-z_]*)", name)
        expanded |= {f"{match[1]}{alt}{match[3]}" for alt in match[2].split("|")} if match else {name}
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = re.sub(r"\boffset\s+-?(?:[0-9]+(?:ms|[smhdwy]))+", "", text)
    text = re.sub(r"(?<![a-zA-Z_:])[0-9][0-9.]*(e[+-]?[0-9]+)?", "", text)
    for match in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", text):
        word = match.group(0)
        after = text[match.end() :].lstrip()
        if word in _KEYWORDS or after.startswith("("):
            continue
        expanded.add(word)
    return expanded
