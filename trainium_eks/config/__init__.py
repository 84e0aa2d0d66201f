"""The platform's configuration: one typed, validated object.

- :mod:`.schema`: the fields and their defaults (:class:`PlatformSettings`; the job's in
  :class:`~trainium_job.spec.BertJobSpec`);
- :mod:`.platform_checks`: the deployment checks (the `training_*` keys: :mod:`.job_checks`);
- :mod:`.validated`: :class:`PlatformConfig`, the settings checked when built;
- :mod:`.context`: :func:`config_from_context`, CDK context values coerced to the fields' types.

Every check raises :class:`~trainium_job.errors.ConfigError` whose message names the key, the value and the fix, so a
bad input stops synth with one line and no stack is built.
"""

from ..arguments import az_id_prefix
from ..cluster.eks_cluster import MAX_PUBLIC_ENDPOINT_ADDRESSES, region_partition
from ..nodes.launch_template import EFA_LAYOUTS
from .context import config_from_context
from .platform_checks import (
    ALWAYS_ON_ADDONS,
    AZ_ID_PARTITIONS,
    CAPACITY_TYPES,
    MAX_TAGS,
    OPTIONAL_ADDONS,
    PLATFORM_TAG_KEYS,
    SUPPORTED_PARTITIONS,
    name_prefix_problem,
    tag_problem,
    unverified_addons,
)
from .schema import PlatformSettings
from .validated import PlatformConfig

__all__ = [
    "ALWAYS_ON_ADDONS",
    "AZ_ID_PARTITIONS",
    "CAPACITY_TYPES",
    "EFA_LAYOUTS",
    "MAX_PUBLIC_ENDPOINT_ADDRESSES",
    "MAX_TAGS",
    "OPTIONAL_ADDONS",
    "PLATFORM_TAG_KEYS",
    "SUPPORTED_PARTITIONS",
    "PlatformConfig",
    "PlatformSettings",
    "az_id_prefix",
    "config_from_context",
    "name_prefix_problem",
    "region_partition",
    "tag_problem",
    "unverified_addons",
]
