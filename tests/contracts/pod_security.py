"""Pod Security Admission: the namespace labels it reads and the levels and versions it accepts.

Version: Kubernetes 1.34-1.36 (the built-in admission plugin, GA since 1.25).
"""

from __future__ import annotations

from tests.contracts.model import Contract, Entry

_API = "kubernetes/kubernetes staging/src/k8s.io/pod-security-admission/api/constants.go"
_DOC = "kubernetes.io, 'Pod Security Admission' (Pod Security Admission labels for namespaces)"
#: The policy levels (``LevelPrivileged``, ``LevelBaseline``, ``LevelRestricted``).
LEVELS = ("privileged", "baseline", "restricted")
#: A ``<mode>-version`` label: ``latest`` or a Kubernetes minor version ``v1.<minor>``.
VERSION_PATTERN = r"^(latest|v1\.[0-9]+)$"

CONTRACT = Contract(
    consumer="Pod Security Admission",
    version="Kubernetes 1.34-1.36",
    entries=(
        *(
            Entry(
                f"pod-security.kubernetes.io/{mode}",
                f"the level the namespace's pods are {what}",
                f"{_API} ({const}); {_DOC}",
                values=LEVELS,
            )
            for mode, what, const in (
                ("enforce", "admitted at (violations are rejected)", "EnforceLevelLabel"),
                ("audit", "audited at (violations are annotated in the audit log)", "AuditLevelLabel"),
                ("warn", "warned about (violations warn the client)", "WarnLevelLabel"),
            )
        ),
        *(
            Entry(
                f"pod-security.kubernetes.io/{mode}-version",
                f"the Kubernetes version of the {mode} level's rules (default latest)",
                f"{_API} ({const}); {_DOC}",
            )
            for mode, const in (
                ("enforce", "EnforceVersionLabel"),
                ("audit", "AuditVersionLabel"),
                ("warn", "WarnVersionLabel"),
            )
        ),
    ),
)
PREFIX = "pod-security.kubernetes.io/"
