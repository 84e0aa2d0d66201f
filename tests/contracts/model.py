"""The shape of a consumer table: entries with what the consumer does with each name, and where
that is written."""

from __future__ import annotations

from dataclasses import dataclass, field

#: Kinds of entry. ``value``: one value; ``map``: a mapping whose keys are free (labels, a node
#: selector); ``list``: a list; ``flag``: a command-line flag inside a variable.
KINDS = ("value", "map", "list", "flag")


@dataclass(frozen=True)
class Entry:
    """One name a consumer reads (or sets itself, or does NOT read) at the pinned version.

    Attributes:
        name: the name as the consumer spells it (a variable, a key, a dotted Helm values path).
        use: what the consumer does with it.
        source: the citation: ``owner/repo@tag:path:line`` or a documentation page.
        kind: one of :data:`KINDS`.
        values: the values the consumer accepts, where it accepts a fixed set (empty: any).
        required: the consumer fails (or silently does the wrong thing) without it.
        sets_itself: the consumer sets this name itself; what we emit must not.
        read: False for a name the consumer does NOT read at this version (kept to say why).
    """

    name: str
    use: str
    source: str
    kind: str = "value"
    values: tuple[str, ...] = ()
    required: bool = False
    sets_itself: bool = False
    read: bool = True

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"{self.name}: kind {self.kind!r} is not one of {KINDS}")


@dataclass(frozen=True)
class Contract:
    """The names one consumer reads, at one version.

    Attributes:
        consumer: the program (and the part of it) that reads the names.
        version: the version the entries apply to (the one the platform pins).
        entries: the names.
    """

    consumer: str
    version: str
    entries: tuple[Entry, ...] = field(default=())

    def __post_init__(self) -> None:
        names = [e.name for e in self.entries]
        if len(names) != len(set(names)):
            raise ValueError(f"{self.consumer}: a name is listed twice")

    def get(self, name: str) -> Entry | None:
        """The entry of ``name``, or None."""
        return next((e for e in self.entries if e.name == name), None)

    def settable(self) -> set[str]:
        """Names the consumer reads and leaves to us."""
        return {e.name for e in self.entries if e.read and not e.sets_itself}

    def required(self) -> set[str]:
        return {e.name for e in self.entries if e.required}
