"""The torchrun command line, re-exported from the job contract (``trainium_job.launch``)."""

from trainium_job.launch import (
    DEFAULT_PRECOMPILE_STEPS,
    PRECOMPILE_FLAG,
    RDZV_BACKENDS,
    LaunchSpec,
    launch_env,
    precompile_args,
    render,
    script_args_from_dict,
    torchrun_args,
)

__all__ = [
    "DEFAULT_PRECOMPILE_STEPS",
    "PRECOMPILE_FLAG",
    "RDZV_BACKENDS",
    "LaunchSpec",
    "launch_env",
    "precompile_args",
    "render",
    "script_args_from_dict",
    "torchrun_args",
]
