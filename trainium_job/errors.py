"""The one error type of the library: a value that cannot be deployed.

Every check (configuration, job spec, construct props) raises it, the way aws-cdk-lib's
constructs raise ``ValidationError``: one line naming the field the user set, its value and the
fix. It subclasses ``ValueError`` so callers that catch that keep working.
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
