"""The configuration as the app and the constructs use it: the settings, checked when built."""

from __future__ import annotations

from dataclasses import dataclass

from .field_docs import with_field_docs
from .job_checks import resolve_switches
from .platform_checks import validate
from .schema import PlatformSettings


@dataclass(frozen=True)
class PlatformConfig(PlatformSettings):
    """Everything a deployment of the platform can vary (fields and defaults: :class:`PlatformSettings`).

    Building one runs every check (:func:`~trainium_eks.config.platform_checks.validate`): an invalid
    configuration never exists, and the first problem stops synth with one line naming the key.
    """

    def __post_init__(self) -> None:
        # Resolve, then check: switches given as "true"/"false" become booleans first.
        object.__setattr__(self, "training", resolve_switches(self.training))
        validate(self)


# help(PlatformConfig) lists the fields as PlatformSettings declares and documents them.
PlatformConfig.__doc__ = with_field_docs(PlatformConfig, fields_of=PlatformSettings)
