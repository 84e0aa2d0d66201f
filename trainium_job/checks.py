"""The small shared checks: each raises :class:`ConfigError` naming the field it was given.

One owner per rule: a caller passes the name the user typed (a context key, a property name)
and gets the same wording everywhere.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, TypeVar

from .errors import ConfigError

#: RFC 1123 label (what pod host names, Service and namespace names must be).
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
#: Longest RFC 1123 label.
MAX_LABEL = 63

T = TypeVar("T")


def is_whole_number(value: object) -> bool:
    """An ``int`` that is not a ``bool`` (``True`` is an ``int`` in Python)."""
    return isinstance(value, int) and not isinstance(value, bool)


def whole_number(field: str, value: Any, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """``value`` if it is a whole number in ``[minimum, maximum]``; ConfigError otherwise."""
    if not is_whole_number(value):
        raise ConfigError(field, value, "must be a whole number")
    if minimum is not None and maximum is not None and not minimum <= value <= maximum:
        raise ConfigError(field, value, f"use {minimum} to {maximum}")
    if minimum is not None and value < minimum:
        fix = "0 or more" if minimum == 0 else f"of at least {minimum}"
        raise ConfigError(field, value, f"must be a whole number {fix}")
    if maximum is not None and value > maximum:
        raise ConfigError(field, value, f"use at most {maximum}")
    return int(value)


def flag(field: str, value: Any) -> bool:
    """``value`` if it is a bool; ConfigError otherwise."""
    if not isinstance(value, bool):
        raise ConfigError(field, value, "must be true or false")
    return value


def one_of(field: str, value: T, choices: Iterable[T]) -> T:
    """``value`` if it is one of ``choices``; ConfigError listing them otherwise."""
    options = tuple(choices)
    if value not in options:
        raise ConfigError(field, value, f"choose one of {', '.join(map(str, options))}")
    return value


def is_dns_label(name: object, *, max_len: int = MAX_LABEL) -> bool:
    return isinstance(name, str) and len(name) <= max_len and bool(DNS1123_LABEL.match(name))


def dns_label(field: str, value: Any, *, max_len: int = MAX_LABEL) -> str:
    """``value`` if it is a DNS-1123 label of at most ``max_len`` characters; ConfigError otherwise."""
    if not is_dns_label(value, max_len=max_len):
        raise ConfigError(
            field, value, f"use at most {max_len} lower-case letters, digits or '-' (a DNS-1123 label)"
        )
    return str(value)
