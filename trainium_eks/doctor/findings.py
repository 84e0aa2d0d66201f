"""What a doctor check reports: one line with its status, what it found and the fix."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple


class Status(enum.Enum):
    """How a finding bears on a deployment."""

    #: The account can hold this part of the platform.
    OK = "ok"
    #: Could not be verified, or works at a cost or risk the user should know of; not a blocker.
    WARN = "warn"
    #: ``cdk deploy`` would fail (or roll back) on this: a blocker.
    FAIL = "FAIL"


class Verdict(NamedTuple):
    """What one check function decides; the runner adds the check's name."""

    status: Status
    found: str
    fix: str = ""


@dataclass(frozen=True)
class Finding:
    """One check's result.

    Attributes:
        status: :class:`Status`.
        check: the check's short name (``trn-quota``, ``bootstrap``, ...).
        found: what the account answered, in words.
        fix: what to do about it; empty when there is nothing to do.
    """

    status: Status
    check: str
    found: str
    fix: str = ""

    @classmethod
    def of(cls, check: str, verdict: Verdict) -> Finding:
        """The finding of check ``check`` with ``verdict``."""
        return cls(verdict.status, check, verdict.found, verdict.fix)

    @property
    def line(self) -> str:
        """``ok|warn|FAIL <check>: <found>; <fix>`` (no ``; <fix>`` without a fix)."""
        text = f"{self.status.value} {self.check}: {self.found}"
        return f"{text}; {self.fix}" if self.fix else text


def blockers(findings: Iterable[Finding]) -> list[Finding]:
    """The findings that stop a deployment."""
    return [f for f in findings if f.status is Status.FAIL]


def summary(findings: Iterable[Finding]) -> str:
    """``N ok, N warn, N FAIL`` for the last line of the report."""
    counts = {status: 0 for status in Status}
    for finding in findings:
        counts[finding.status] += 1
    return ", ".join(f"{counts[s]} {s.value}" for s in Status)
