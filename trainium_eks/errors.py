"""The library's error type, re-exported from the job contract (``trainium_job.errors``)."""

from trainium_job.errors import ConfigError

__all__ = ["ConfigError"]
