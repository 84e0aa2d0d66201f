"""CDK context -> :class:`PlatformConfig`: each value coerced to its field's type.

Context keys are the configuration's fields, the job spec's fields under ``training_<field>``
(``training_global_batch`` sets ``BertJobSpec.global_batch``) and phase 2's under
``phase2_<field>`` (``PHASE2_FIELDS``): the keys of docs/configuration.md.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from collections.abc import Mapping
from typing import Any

from trainium_job.errors import ConfigError
from trainium_job.spec import CONTEXT_FIELDS, CONTEXT_PREFIX, BertJobSpec, context_key, phase2_spec

from .schema import PHASE2_FIELDS, PHASE2_PREFIX
from .validated import PlatformConfig

#: The spec's ``script_args`` (stored as pairs) is given as a JSON object, like the other mappings.
_SPEC_ANNOTATIONS = {
    f.name: ("Mapping[str, str]" if f.name == "script_args" else str(f.type))
    for f in dataclasses.fields(BertJobSpec)
}
#: The configuration's fields that hold job specs (set through the keys of their fields).
_JOB_FIELDS = ("training", "phase2")
#: The spec's fields a context key sets (their declarations say so, ``JobKey.set_by``): not where
#: a phase starts or which vocabulary its export reads, which the workload derives
#: (``training_phases``, ``phase2_init_from``, ``vocab_source``).

#: Context key -> the annotation of what it sets: the platform's own fields, and the job spec's
#: fields under ``training_<field>``.
CONTEXT_KEYS = {
    **{f.name: str(f.type) for f in dataclasses.fields(PlatformConfig) if f.name not in _JOB_FIELDS},
    **{
        context_key(name): annotation
        for name, annotation in _SPEC_ANNOTATIONS.items()
        if name in CONTEXT_FIELDS
    },
    **{PHASE2_PREFIX + name: _SPEC_ANNOTATIONS[name] for name in PHASE2_FIELDS},
}


def _coerce(name: str, raw: Any) -> Any:
    """Turn a context value (JSON from cdk.json, or a string from ``-c``) into the field's type."""
    annotation = CONTEXT_KEYS[name]
    # ``X | None`` (what pyupgrade writes) and ``Optional[X]``: "", "none" and "null" mean None.
    optional = annotation.endswith(" | None") or annotation.startswith("Optional[")
    if optional:
        if raw is None or (isinstance(raw, str) and raw.strip().lower() in ("", "none", "null")):
            return None
        annotation = annotation.removesuffix(" | None").removeprefix("Optional[").removesuffix("]")
    if annotation == "bool":
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in ("true", "false"):
            return text == "true"
        raise ConfigError(name, raw, "must be true or false")
    if annotation == "int":
        if isinstance(raw, bool):
            raise ConfigError(name, raw, "must be a whole number")
        if isinstance(raw, int):
            return raw
        try:
            return int(str(raw).strip())
        except ValueError:
            raise ConfigError(name, raw, "must be a whole number") from None
    if annotation.startswith("tuple"):
        if isinstance(raw, str):
            text = raw.strip()
            if text.startswith("["):
                raw = _json(name, text)
            else:
                raw = [part.strip() for part in text.split(",") if part.strip()]
        if not isinstance(raw, (list, tuple)) or not all(isinstance(v, str) for v in raw):
            raise ConfigError(name, raw, "give a list of strings (JSON list or comma-separated)")
        return tuple(raw)
    if annotation.startswith("Mapping"):
        if isinstance(raw, str):
            raw = _json(name, raw)
        if not isinstance(raw, dict):
            raise ConfigError(name, raw, 'give a JSON object such as {"team": "ml"}')
        return dict(raw)
    if not isinstance(raw, str):
        raise ConfigError(name, raw, "must be a string")
    return raw.strip()


def _json(name: str, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(name, text, f"not valid JSON ({err.msg})") from None


def config_from_context(context: Mapping[str, Any]) -> PlatformConfig:
    """Build the configuration from CDK context.

    Plain keys (no ``:`` or ``@``, which CDK's own keys and feature flags carry) are configuration
    fields; an unknown plain key is an error with the closest field name, so a typo never falls
    back silently to a default.
    """
    values: dict[str, Any] = {}
    job: dict[str, Any] = {}
    phase2: dict[str, Any] = {}
    for key, raw in context.items():
        if ":" in key or "@" in key or key.startswith("aws-cdk") or key.startswith("availability-zones"):
            continue
        if key not in CONTEXT_KEYS:
            close = difflib.get_close_matches(key, list(CONTEXT_KEYS), n=1)
            hint = f"did you mean '{close[0]}'?" if close else f"known keys: {', '.join(CONTEXT_KEYS)}"
            raise ConfigError(key, raw, f"unknown configuration key; {hint}")
        spec_field = key.removeprefix(CONTEXT_PREFIX)
        if key.startswith(CONTEXT_PREFIX) and spec_field in _SPEC_ANNOTATIONS:
            job[spec_field] = _coerce(key, raw)
        elif key.startswith(PHASE2_PREFIX) and key.removeprefix(PHASE2_PREFIX) in PHASE2_FIELDS:
            phase2[key.removeprefix(PHASE2_PREFIX)] = _coerce(key, raw)
        else:
            values[key] = _coerce(key, raw)
    training = BertJobSpec(**job)
    return PlatformConfig(training=training, phase2=_phase2(training, phase2), **values)


def _phase2(training: BertJobSpec, changes: Mapping[str, Any]) -> BertJobSpec | None:
    """Phase 2's job with the ``phase2_*`` keys' changes (None: the reference's, derived later);
    its errors name the ``phase2_*`` key that was given."""
    if not changes:
        return None
    try:
        return phase2_spec(training, **changes)
    except ConfigError as err:
        name = err.field_name.removeprefix(CONTEXT_PREFIX)
        key = PHASE2_PREFIX + name if name in PHASE2_FIELDS else err.field_name
        raise ConfigError(key, err.value, err.fix) from None
