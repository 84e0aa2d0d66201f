"""The Neuron SDK: the runtime's ``NEURON_RT_*`` variables, the compiler's flags and compile cache,
what ``neuron_parallel_compile`` reads and sets, and the collectives (``CCOM_*``).

Version: Neuron 2.28.x-2.29.x (runtime 2.30/2.31; the PyTorch/XLA training images). Sources:
the Neuron documentation (aws-neuron/aws-neuron-sdk, the source of awsdocs-neuron.readthedocs-hosted.com).
"""

from __future__ import annotations

from tests.contracts.model import Contract, Entry

_DOCS = "aws-neuron/aws-neuron-sdk@v2.29.0"
_RT_TABLE = f"{_DOCS}:neuron-runtime/nrt-configurable-parameters.rst (NeuronX Runtime Configuration)"
_PARALLEL = (
    f"{_DOCS}:frameworks/torch/torch-neuronx/api-reference-guide/training/pytorch-neuron-parallel-compile.rst"
)
_CACHE = f"{_DOCS}:about-neuron/arch/neuron-features/neuron-caching.rst (Neuron Persistent Cache)"
#: Boolean variables accept 0, 1, false or true (Neuron Runtime environment variable reference).
BOOLEAN = ("0", "1", "false", "true")

RUNTIME = Contract(
    consumer="Neuron runtime (libnrt)",
    version="runtime 2.30-2.31 (Neuron 2.28-2.29)",
    entries=(
        Entry(
            "NEURON_RT_VISIBLE_CORES", "the NeuronCores this process reserves (a contiguous range)", _RT_TABLE
        ),
        Entry("NEURON_RT_NUM_CORES", "how many NeuronCores this process reserves", _RT_TABLE),
        Entry("NEURON_RT_LOG_LOCATION", "console or syslog", _RT_TABLE, values=("console", "syslog")),
        Entry(
            "NEURON_RT_LOG_LEVEL",
            "log verbosity",
            _RT_TABLE,
            values=("ERROR", "WARNING", "INFO", "DEBUG", "TRACE"),
        ),
        Entry("NEURON_RT_EXEC_TIMEOUT", "seconds before an execution times out (default 30)", _RT_TABLE),
        Entry(
            "NEURON_RT_RESET_CORES",
            "whether cores are reset when an application initializes them; reset is the default "
            "(runtime 2.10 on): 0 turns it off, 1 restates the default",
            f"{_DOCS}:neuron-runtime/nrt-troubleshoot.rst:739; release notes of aws-neuronx-runtime-lib "
            "('Changed default runtime behavior to reset NeuronCores when initializing applications')",
            values=BOOLEAN,
        ),
        Entry(
            "NEURON_RT_ROOT_COMM_ID",
            "ip:port of rank 0 in the collectives worker pool (torch-neuronx derives it from MASTER_ADDR)",
            f"{_DOCS}:neuron-runtime/nrt-developer-guide.rst:1062",
        ),
    ),
)

#: Flags inside ``NEURON_CC_FLAGS`` that the compile-cache layer and the compiler read.
CC_FLAGS = Contract(
    consumer="torch-neuronx compile cache (NEURON_CC_FLAGS)",
    version="Neuron 2.28-2.29",
    entries=(
        Entry(
            "--cache_dir",
            "the compile cache: a local path or an s3:// URL; wins over NEURON_COMPILE_CACHE_URL. The "
            "precompile and the training run must name the same cache",
            f"{_CACHE}; {_PARALLEL}",
            kind="flag",
        ),
        Entry(
            "--retry_failed_compilation",
            "compile again the graphs the cache holds as failed",
            _PARALLEL,
            kind="flag",
        ),
    ),
)

COMPILER = Contract(
    consumer="torch-neuronx / neuron_parallel_compile",
    version="Neuron 2.28-2.29",
    entries=(
        Entry(
            "NEURON_CC_FLAGS",
            "flags for the compile cache and neuronx-cc (see CC_FLAGS); without a cache flag or "
            "NEURON_COMPILE_CACHE_URL the cache is /var/tmp/neuron-compile-cache, inside the container",
            f"{_CACHE}; {_PARALLEL}",
        ),
        Entry(
            "NEURON_COMPILE_CACHE_URL",
            "the compile cache URL (s3:// or a local path); --cache_dir wins if both are given",
            f"{_CACHE}; {_PARALLEL}",
        ),
        Entry(
            "NEURON_PARALLEL_COMPILE_MAX_RETRIES",
            "neuron_parallel_compile: retries of a failed graph compilation (default 0)",
            _PARALLEL,
        ),
        Entry(
            "NEURON_IGNORE_TRAINING_SCRIPT_ERROR_AND_COMPILE",
            "neuron_parallel_compile: compile the graphs extracted so far even if the script failed",
            _PARALLEL,
        ),
        Entry(
            "NEURON_EXTRACT_GRAPHS_ONLY",
            "set by neuron_parallel_compile for its trial run (graph extraction, outputs invalid)",
            f"{_PARALLEL} ('runs your command with environment variables that put your training "
            "script into graph extraction mode'); ray-project/ray python/ray/train/torch/xla/config.py "
            "(_set_neuron_parallel_compile_env_vars)",
            sets_itself=True,
        ),
        Entry(
            "NEURON_PARALLEL_COMPILE",
            "set by neuron_parallel_compile for its trial run",
            "ray-project/ray python/ray/train/torch/xla/config.py (_set_neuron_parallel_compile_env_vars)",
            sets_itself=True,
        ),
        Entry(
            "NEURON_FALL_BACK_TO_NULL_NEFF",
            "set by neuron_parallel_compile for its trial run (stub graphs, outputs zeros)",
            "ray-project/ray python/ray/train/torch/xla/config.py (_set_neuron_parallel_compile_env_vars)",
            sets_itself=True,
        ),
    ),
)

#: The Neuron collectives library documents no environment variable: no Neuron document names
#: ``CCOM_SOCKET_IFNAME`` (it appears only in sample code, aws-neuron/aws-neuron-eks-samples
#: dp_bert_hf_pretrain/lib/trn1_dist_ddp.py:47). Neuron's multi-node environment is exactly
#: FI_PROVIDER, FI_EFA_USE_DEVICE_RDMA and (AL2 only) FI_EFA_FORK_SAFE.
COLLECTIVES = Contract(
    consumer="Neuron collectives (aws-neuronx-collectives)",
    version="2.30-2.31 (Neuron 2.28-2.29)",
    entries=(
        Entry(
            "CCOM_SOCKET_IFNAME",
            "documented nowhere by Neuron (runtime configuration, variable reference, multi-node "
            "setup); a pod has only lo and eth0, so there is no interface to choose",
            f"{_DOCS} (no match in the documentation tree); "
            "frameworks/torch/torch-neuronx/setup-trn1-multi-node-execution.rst",
            read=False,
        ),
    ),
)

#: The environment Neuron documents for multi-node training on Trn1 with EFA ("Application
#: execution environment"); FI_EFA_FORK_SAFE is marked "only required when running on AL2".
MULTI_NODE_ENV = {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1"}
MULTI_NODE_ENV_SOURCE = f"{_DOCS}:frameworks/torch/torch-neuronx/setup-trn1-multi-node-execution.rst"
#: Where the compile cache is without a cache flag or URL: inside the container, lost with it.
DEFAULT_CACHE = "/var/tmp/neuron-compile-cache"
