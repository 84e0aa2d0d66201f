"""The library's error for a value that cannot be deployed.

Its own module, imported by the configuration and by every construct that validates its props,
so that no construct module needs ``config`` (which imports the constructs' checks).
"""

from __future__ import annotations

from typing import Any


class ConfigError(ValueError):
    """A configuration value that cannot be deployed; the message is meant for the user."""

    def __init__(self, field_name: str, value: Any, fix: str) -> None:
        self.field_name = field_name
        self.value = value
        self.fix = fix
        super().__init__(f"config '{field_name}' = {value!r} is invalid: {fix}")
