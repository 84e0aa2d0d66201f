"""Every name built from a name prefix, and deterministic names derived from a job's spec.

The builders (the stacks, the platform's repository, the jobs and their pods) and the checks of a
prefix call the same functions here, so a name's format is written once.

A Volcano Job's (or a batch Job's) pod template is immutable: a changed spec cannot be applied
over the old object. Naming the object after a hash of its spec makes a changed spec a NEW
object (the old one is deleted by the stack update), and an unchanged spec the same name, so a
re-deploy leaves a running job alone.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any, Final, TypeVar

from .checks import DNS1123_LABEL, MAX_LABEL, is_dns_label
from .errors import ConfigError

__all__ = [
    "DEFAULT_NAME_PREFIX",
    "DNS1123_LABEL",
    "HASH_CHARS",
    "MAX_LABEL",
    "TASK_NAME",
    "content_named",
    "digest_name",
    "hashed_name",
    "is_dns1123_label",
    "launch_template_name",
    "max_name_prefix",
    "node_name",
    "platform_stack_name",
    "pod_host_name",
    "repository_name",
    "spec_digest",
    "training_stack_name",
]

Manifest = TypeVar("Manifest")

#: Prefix of every name the platform builds (stacks, the image repository, jobs, node tags), for
#: the app's configuration and for each construct that takes a ``name_prefix``.
DEFAULT_NAME_PREFIX: Final = "trn-bert"
#: Hex characters of the spec digest in a hashed name.
HASH_CHARS = 8
#: Name of the Volcano task (and of the TorchX role): pods are ``<job>-worker-<i>``.
TASK_NAME: Final = "worker"


def platform_stack_name(prefix: str) -> str:
    """The CloudFormation stack of the platform."""
    return f"{prefix}-platform"


def training_stack_name(prefix: str) -> str:
    """The CloudFormation stack of the training workload (also its construct id in the app)."""
    return f"{prefix}-training"


def repository_name(prefix: str) -> str:
    """The ECR repository of the training images."""
    return f"{prefix}/training"


def node_name(prefix: str, instance_type: str) -> str:
    """The ``Name`` tag of a Trainium instance."""
    return f"{prefix}-{instance_type}"


def launch_template_name(prefix: str) -> str:
    """The ``Name`` tag of the Trainium launch template."""
    return f"{prefix}-trainium"


def digest_name(base: str, digest: str) -> str:
    """The name of an object named after its content: ``<base>-<digest>``."""
    return f"{base}-{digest}"


def pod_host_name(job_name: str, index: int) -> str:
    """Host name Volcano's ``svc`` plugin gives pod ``index`` of a job: ``<job>-worker-<index>``."""
    return f"{job_name}-{TASK_NAME}-{index}"


def max_name_prefix(nodes: int) -> int:
    """Longest job-name prefix: the host name of a job's last pod is a DNS label."""
    job_name = digest_name("", "0" * HASH_CHARS)
    return MAX_LABEL - len(pod_host_name(job_name, nodes - 1))


def spec_digest(spec: Any, length: int = HASH_CHARS) -> str:
    """Hex digest of ``spec`` as canonical JSON (sorted keys): equal specs, equal digests."""
    canonical = json.dumps(spec, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:length]


def is_dns1123_label(name: str) -> bool:
    return is_dns_label(name)


def hashed_name(base: str, spec: Any, *, field: str = "name_prefix") -> str:
    """``<base>-<8 hex of the spec>``; ConfigError naming ``field`` (what set ``base``) if the
    result is not a DNS-1123 label."""
    name = digest_name(base, spec_digest(spec))
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
    build: Callable[[str, bool], Manifest],
    *,
    draft_name: str | None = None,
) -> tuple[str, str, Manifest]:
    """``build(name, False)`` under a name that changes exactly when the object's content does.

    Image URIs hold deploy-time tokens (the repository's), which differ between two synths of the
    same app, so the name is hashed from a draft, ``build(draft_name, True)`` (``draft_name``
    defaults to ``base``), in which the builder puts each image's content key (its tag) known at
    synth instead. Returns the name (``<base>-<digest>``), the draft's digest and the object itself.
    """
    draft = build(draft_name or base, True)
    name = hashed_name(base, draft)
    return name, spec_digest(draft), build(name, False)
