"""The one error type of the library: a value that cannot be deployed.

Every check (configuration, job spec, construct props) raises it, the way aws-cdk-lib's
constructs raise ``ValidationError``: one line naming the field the user set, its value and the
fix. It subclasses ``ValueError`` so callers that catch that keep working.
"""

from __future__ import annotations

from typing import Any

#: Context-key prefix -> (class, its field names) whose fields a key of that prefix sets: an
#: error naming such a key also names the field a library user set (see :func:`register_fields`).
_FIELD_OWNERS: dict[str, tuple[str, frozenset[str]]] = {}


def register_fields(prefix: str, owner: str, fields: tuple[str, ...]) -> None:
    """Context keys ``<prefix><field>`` are ``owner``'s ``field`` (``training_max_steps`` is
    ``BertJobSpec.max_steps``): their errors name both, for app and library users alike."""
    _FIELD_OWNERS[prefix] = (owner, frozenset(fields))


def python_field(field_name: str) -> str | None:
    """The ``Class.field`` a library user sets for context key ``field_name``, if it differs."""
    for prefix, (owner, fields) in _FIELD_OWNERS.items():
        name = field_name.removeprefix(prefix)
        if field_name.startswith(prefix) and name in fields:
            return f"{owner}.{name}"
    return None


class ConfigError(ValueError):
    """A configuration value that cannot be deployed; the message is meant for the user.

    ``field_name`` is the context key (``cdk synth -c KEY=...``); where a library user sets it as
    another Python field, the message names that too: ``config 'training_max_steps'
    (BertJobSpec.max_steps) = 5 is invalid: ...``.
    """

    def __init__(self, field_name: str, value: Any, fix: str) -> None:
        self.field_name = field_name
        self.value = value
        self.fix = fix
        attribute = python_field(field_name)
        also = f" ({attribute})" if attribute else ""
        super().__init__(f"config '{field_name}'{also} = {_shown(value)} is invalid: {fix}")


def _shown(value: Any) -> str:
    """``value`` as the message shows it: a construct or other object by its type, not its repr."""
    if value is None or isinstance(value, (str, int, float, bool, tuple, list, dict, frozenset, set)):
        return repr(value)
    return f"<{type(value).__module__}.{type(value).__qualname__}>"
