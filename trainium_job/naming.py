"""Deterministic Kubernetes names derived from a job's spec.

A Volcano Job's (or a batch Job's) pod template is immutable: a changed spec cannot be applied
over the old object. Naming the object after a hash of its spec makes a changed spec a NEW
object (the old one is deleted by the stack update), and an unchanged spec the same name, so a
re-deploy leaves a running job alone.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any, TypeVar

from .checks import DNS1123_LABEL, MAX_LABEL, is_dns_label
from .errors import ConfigError

__all__ = [
    "DNS1123_LABEL",
    "HASH_CHARS",
    "MAX_LABEL",
    "content_named",
    "hashed_name",
    "is_dns1123_label",
    "spec_digest",
]

Manifest = TypeVar("Manifest")

#: Hex characters of the spec digest in a hashed name.
HASH_CHARS = 8


def spec_digest(spec: Any, length: int = HASH_CHARS) -> str:
    """Hex digest of ``spec`` as canonical JSON (sorted keys): equal specs, equal digests."""
    canonical = json.dumps(spec, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:length]


def is_dns1123_label(name: str) -> bool:
    return is_dns_label(name)


def hashed_name(base: str, spec: Any, *, field: str = "name_prefix") -> str:
    """``<base>-<8 hex of the spec>``; ConfigError naming ``field`` (what set ``base``) if the
    result is not a DNS-1123 label."""
    name = f"{base}-{spec_digest(spec)}"
    if not is_dns1123_label(name):
        raise ConfigError(
            field,
            base,
            f"the name {name!r} ({len(name)} characters) built from it is not a DNS-1123 label of at most "
            f"{MAX_LABEL} characters; shorten it",
        )
    return name


def content_named(
    base: str,
    build: Callable[[str, str], Manifest],
    *,
    image: str,
    image_key: str,
    draft_name: str | None = None,
) -> tuple[str, str, Manifest]:
    """``build(name, image)`` under a name that changes exactly when the object's content does.

    The image URI holds deploy-time tokens, so the name is hashed from a draft built with
    ``draft_name`` (default ``base``) and ``image_key``, the image's content hash known at synth.
    Returns the name (``<base>-<digest>``), the draft's digest and the object itself.
    """
    draft = build(draft_name or base, image_key)
    name = hashed_name(base, draft)
    return name, spec_digest(draft), build(name, image)
