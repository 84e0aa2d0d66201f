"""Deterministic Kubernetes names derived from a job's spec.

A Volcano Job's (or a batch Job's) pod template is immutable: a changed spec cannot be applied
over the old object. Naming the object after a hash of its spec makes a changed spec a NEW
object (the old one is deleted by the stack update), and an unchanged spec the same name, so a
re-deploy leaves a running job alone.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

#: RFC 1123 label (what pod host names and Service names must be).
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
MAX_LABEL = 63
HASH_CHARS = 8


def spec_digest(spec: Any, length: int = HASH_CHARS) -> str:
    """Hex digest of ``spec`` as canonical JSON (sorted keys): equal specs, equal digests."""
    canonical = json.dumps(spec, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:length]


def is_dns1123_label(name: str) -> bool:
    return len(name) <= MAX_LABEL and bool(DNS1123_LABEL.match(name))


def hashed_name(base: str, spec: Any) -> str:
    """``<base>-<8 hex of the spec>``; ValueError if the result is not a DNS-1123 label."""
    name = f"{base}-{spec_digest(spec)}"
    if not is_dns1123_label(name):
        raise ValueError(
            f"name {name!r} ({len(name)} characters) is not a DNS-1123 label of at most "
            f"{MAX_LABEL} characters; shorten {base!r}"
        )
    return name
