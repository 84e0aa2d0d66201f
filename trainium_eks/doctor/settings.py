"""The configuration the doctor checks: the app's, built as ``cdk synth`` builds it.

Context comes from ``cdk.json`` and ``cdk.context.json`` in the app's directory, then ``-c
key=value`` overrides (the CDK CLI's order); :func:`trainium_eks.config_from_context` turns it into
the checked :class:`~trainium_eks.PlatformConfig`, so a key the app refuses is refused here too.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from trainium_job.errors import ConfigError

from ..config import PlatformConfig, config_from_context

#: Files of an app directory that hold context, read in this order (later ones win).
CONTEXT_FILES = (("cdk.json", "context"), ("cdk.context.json", None))


def read_context(app_dir: Path) -> dict[str, Any]:
    """The context of the app in ``app_dir`` (feature flags included: the bootstrap probe uses them)."""
    context: dict[str, Any] = {}
    for name, key in CONTEXT_FILES:
        path = app_dir / name
        if not path.is_file():
            continue
        data = json.loads(path.read_text())
        context.update(data.get(key, {}) if key else data)
    return context


def parse_overrides(pairs: Iterable[str]) -> dict[str, str]:
    """``key=value`` strings (``-c`` arguments) as a dict."""
    overrides = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError("-c", pair, "give key=value, e.g. -c desired_nodes=4")
        overrides[key.strip()] = value
    return overrides


def load_config(context: dict[str, Any]) -> PlatformConfig:
    """The platform configuration of ``context`` (ConfigError as synth would raise it)."""
    return config_from_context(context)
