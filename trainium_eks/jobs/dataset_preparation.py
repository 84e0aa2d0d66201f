"""Dataset preparation on the cluster: your own text corpus on FSx -> a shard set, as an Indexed Job.

The Job runs ``python -m training.dataprep.prepare_indexed`` (the training image has it) on ``pods`` pods
at once, on CPU nodes Karpenter launches for them (``trainium_capacity=karpenter``: the
``preparation`` NodePool, :data:`~trainium_eks.versions.PREPARATION_NODES`) or spread over the
Trainium nodegroup's nodes; each tokenizes and masks its share of the corpus with
``cpus_per_pod`` processes, and pod 0 shuffles, writes and publishes the shard set into the
training job's dataset directory, then writes the marker the training pods wait for. The set is
the one ``python -m training.dataprep.prepare_data`` makes on one machine with the same seed and settings,
bit for bit, whatever the pod count (tested with local processes).

The corpus and the vocabulary are paths on FSx (``fsx:/dataset/...`` with ``fsx_s3_import_uri``
imports an S3 prefix there). Idempotent like the staging Job: with the marker present the pods
exit at once. A usage error (invalid bytes, say) fails the whole Job at once (exit code 2);
other pod failures are retried per index. All pods must fit on the nodes together: they wait for
each other between the tokenizing, pool and sample phases. The training job is submitted once
their marker is there, so they never share a node with its pods.
"""

from __future__ import annotations

import argparse
import posixpath
import re
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from constructs import Construct, IConstruct

from trainium_job import checks
from trainium_job.allocatable import DEFAULT_NODE_DAEMONS, NODE_MARGIN, Resources, node_allocatable
from trainium_job.entry_points import PREPARE_INDEXED
from trainium_job.errors import ConfigError
from trainium_job.instances import InstanceFacts
from trainium_job.naming import spec_digest
from trainium_job.paths import DATA_MOUNT, JobPaths
from trainium_job.security import pod_security_context

from .._training.dataprep.prep_settings import build_parser, prep_config, run_settings
from .._training.dataprep.prep_settings import check_settings as check_tool_settings
from .._training.dataprep.text_input import UsageError
from ..addons.node_daemons import total
from ..addons.registry import configured_node_daemons
from ..arguments import AnyCluster, require_cluster
from ..versions import PREPARATION_NODES
from .dataset_job import (
    DatasetJob,
    dataset_container,
    dataset_volumes,
    pod_identity,
    preparation_node_placement,
    trainium_placement,
)
from .dataset_staging import STAGING_RESOURCES

#: ``python -m training.dataprep.prepare_data`` settings a deployment may give (``preparation_args``):
#: flag -> takes a value (False: a switch, given as "true"). The rest (inputs, output, workers,
#: progress) the construct sets itself. tests/trainium_eks check these against the tool's parser.
SETTING_FLAGS: dict[str, bool] = {
    "max_seq_len": True,
    "max_pred_len": True,
    "masked_lm_prob": True,
    "short_seq_prob": True,
    "dupe_factor": True,
    "seed": True,
    "num_shards": True,
    "samples_per_shard": True,
    "output_prefix": True,
    "chunk_mb": True,
    "pool_tokens": True,
    "encoding": True,
    "errors": True,
    "whole_word_mask": False,
    "target_per_sample": False,
    "no_lower_case": False,
    "input_pattern": True,
}
#: What waits beside the preparation pods on a node by default: nothing.
NOTHING_BESIDE = Resources()
#: Memory per CPU of a preparation pod: each worker process peaks at a few hundred MiB.
MEMORY_GIB_PER_CPU = 2
#: Exit code of the tools' one-line usage errors (argparse's): retrying cannot help.
USAGE_ERROR_EXIT_CODE = 2
CONTAINER = "prepare"
_FSX_PATH = re.compile(r"^fsx:/[A-Za-z0-9._/-]+$")
_VALUE = re.compile(r"^[A-Za-z0-9._*?-]+$")


def check_fsx_path(field: str, value: str) -> str:
    """The path inside the pods (under the FSx mount) of ``fsx:/<path>``."""
    if not isinstance(value, str) or not _FSX_PATH.match(value) or ".." in value.split("/"):
        raise ConfigError(
            field, value, "give a path on the file system such as fsx:/dataset/corpus (no '..')"
        )
    return DATA_MOUNT + value[len("fsx:") :]


class _ParseError(Exception):
    pass


def _raise(message: str) -> NoReturn:
    raise _ParseError(message)


def parse_settings(args: Mapping[str, Any]) -> tuple[list[str], argparse.Namespace]:
    """``prepare_data`` flags from ``{"dupe_factor": "5", "whole_word_mask": "true"}``, and what the
    tool's own parser (``training.dataprep.prepare_data.build_parser``) and settings checks make of them,
    so a value the Indexed Job would refuse (``{"dupe_factor": "many"}``) stops synth."""
    flags: list[str] = []
    for key, value in sorted(args.items()):
        if key not in SETTING_FLAGS:
            raise ConfigError(
                "args",
                {key: value},
                f"not a setting of training.dataprep.prepare_data; use {', '.join(SETTING_FLAGS)}",
            )
        text = str(value).strip()
        if not SETTING_FLAGS[key]:
            if text.lower() not in ("true", "false"):
                raise ConfigError("args", {key: value}, f'\'{key}\' is a switch: give "true" or "false"')
            flags += [f"--{key}"] if text.lower() == "true" else []
        elif isinstance(value, bool) or not _VALUE.match(text):
            raise ConfigError(
                "args",
                {key: value},
                "give a plain number, name or file pattern (letters, digits, '.', '_', '-', '*', '?')",
            )
        else:
            flags += [f"--{key}", text]
    parser = build_parser()
    parser.allow_abbrev = False
    parser.error = _raise  # type: ignore[method-assign]
    try:
        # --input, --vocab and --output_dir are the construct's own (placeholders here).
        parsed = parser.parse_args(
            ["--input", "corpus", "--vocab", "vocab.txt", "--output_dir", "out", *flags]
        )
        check_tool_settings(prep_config(parsed), run_settings(parsed))
    except (_ParseError, UsageError) as err:
        message = str(err)
        named = next((k for k in sorted(args, key=len, reverse=True) if f"--{k}" in message), None)
        raise ConfigError(
            "args",
            {named: args[named]} if named else dict(args),
            f"training.dataprep.prepare_data refuses it: {message}",
        ) from None
    return flags, parsed


def check_settings(args: Mapping[str, Any]) -> list[str]:
    """The ``prepare_data`` flags of ``args`` (see :func:`parse_settings`)."""
    return parse_settings(args)[0]


def prepared_shape(args: Mapping[str, Any]) -> tuple[int, int]:
    """(sequence length, predictions per sequence) of the set ``args`` prepare."""
    parsed = parse_settings(args)[1]
    return parsed.max_seq_len, parsed.max_pred_len


def pod_resources(cpus_per_pod: int) -> Resources:
    """Requests (= limits) of one preparation pod: its CPUs and :data:`MEMORY_GIB_PER_CPU` each."""
    return Resources(
        millicpu=cpus_per_pod * 1000, memory_mib=cpus_per_pod * MEMORY_GIB_PER_CPU * 1024, pods=1
    )


def pods_per_node(pods: int, nodes: int) -> int:
    """The most preparation pods one node holds: the Job spreads them evenly (maxSkew 1)."""
    return -(-pods // nodes)


def check_pods(
    pods: int,
    cpus_per_pod: int,
    facts: InstanceFacts | None = None,
    nodes: int | None = None,
    *,
    daemons: Resources = DEFAULT_NODE_DAEMONS,
    beside: Resources = NOTHING_BESIDE,
) -> None:
    """Whole numbers; and with the Trainium node type and count (the nodegroup's), that all pods
    fit on the nodes at once (they wait for each other: a pod left pending would stall the others),
    beside the nodes' DaemonSets (``daemons``), whatever else waits there meanwhile (``beside``:
    phase 2's staging pod) and :data:`~trainium_job.allocatable.NODE_MARGIN`. The training job
    is submitted once their marker is there: its pod is not beside them."""
    for field, value in (("pods", pods), ("cpus_per_pod", cpus_per_pod)):
        checks.whole_number(field, value, minimum=1)
    if facts is None or nodes is None:
        return
    per_node = pods_per_node(pods, nodes)
    need = daemons + beside + pod_resources(cpus_per_pod).times(per_node) + NODE_MARGIN
    allocatable = node_allocatable(facts).allocatable
    if not need.fits_in(allocatable):
        raise ConfigError(
            "pods",
            pods,
            f"{pods} pods x {cpus_per_pod} CPUs put {per_node} on some of the {nodes} {facts.name} node(s): with "
            f"the node's DaemonSets{' and what waits beside them' if beside.pods else ''} and a margin of "
            f"{NODE_MARGIN.describe()} that is {need.describe()} ({need.pods} pods), more than its allocatable "
            f"{allocatable.describe()} ({allocatable.pods} pods); all pods must run at once: use fewer pods "
            "or CPUs per pod",
        )


def preparation_node_room(daemons: Resources = DEFAULT_NODE_DAEMONS) -> Resources:
    """What the largest preparation node leaves the preparation pods: Karpenter's allocatable of
    ``PREPARATION_NODES.largest`` less ``daemons`` and :data:`~trainium_job.allocatable.NODE_MARGIN`."""
    return PREPARATION_NODES.largest_allocatable - daemons - NODE_MARGIN


def preparation_nodes_taken(
    pods: int, cpus_per_pod: int, *, daemons: Resources = DEFAULT_NODE_DAEMONS
) -> tuple[int, int]:
    """(pods per node, nodes) of the preparation on the largest preparation nodes (0 per node: one
    pod does not fit; then 0 nodes)."""
    room, pod = preparation_node_room(daemons), pod_resources(cpus_per_pod)
    per_node = max(0, min(room.millicpu // pod.millicpu, room.memory_mib // pod.memory_mib, room.pods))
    return per_node, (-(-pods // per_node) if per_node else 0)


def check_preparation_nodes(
    pods: int, cpus_per_pod: int, *, daemons: Resources = DEFAULT_NODE_DAEMONS
) -> None:
    """With ``trainium_capacity=karpenter``: that the pods fit on the preparation nodes Karpenter
    launches for them (:data:`~trainium_eks.versions.PREPARATION_NODES`), all at once.

    One pod must fit on the largest node beside ``daemons`` (the Trainium nodes' DaemonSets: every
    DaemonSet of a preparation node runs on a Trainium node too, tests/stacks/
    test_trainium_placement.py) and the margin. Karpenter fills a new node with as many pending
    pods as the largest type holds and, while it launches, counts it at the vCPUs of the largest
    type it may be against the pool's limit (kubernetes-sigs/karpenter v1.14.1
    pkg/controllers/provisioning/scheduling/scheduler.go L707-720, L786, L1068-1085): the pods
    take ceil(pods / per node) x its vCPUs of the limit.
    """
    checks.whole_number("pods", pods, minimum=1)
    checks.whole_number("cpus_per_pod", cpus_per_pod, minimum=1)
    nodes, room = PREPARATION_NODES, preparation_node_room(daemons)
    per_node, launched = preparation_nodes_taken(pods, cpus_per_pod, daemons=daemons)
    where = "the preparation nodes: PREPARATION_NODES in trainium_eks/versions.py, docs/capacity.md"
    if per_node < 1:
        most = min(room.millicpu // 1000, room.memory_mib // (MEMORY_GIB_PER_CPU * 1024))
        raise ConfigError(
            "cpus_per_pod",
            cpus_per_pod,
            f"a pod of {cpus_per_pod} CPUs and {cpus_per_pod * MEMORY_GIB_PER_CPU} GiB does not fit on the "
            f"largest preparation node, a {nodes.largest} ({nodes.largest_allocatable.describe()} allocatable, "
            f"less {daemons.describe()} of DaemonSets and a margin of {NODE_MARGIN.describe()}): give at most "
            f"{most} ({where})",
        )
    if launched * nodes.largest_vcpus > nodes.limit_vcpus:
        raise ConfigError(
            "pods",
            pods,
            f"{pods} pods x {cpus_per_pod} CPUs take {launched} preparation nodes ({per_node} per {nodes.largest}), "
            f"{launched * nodes.largest_vcpus} vCPUs, over the preparation NodePool's limit of "
            f"{nodes.limit_vcpus}: Karpenter would not launch the rest, and all pods must run at once: give at "
            f"most {nodes.limit_vcpus // nodes.largest_vcpus * per_node} pods of {cpus_per_pod} CPUs ({where})",
        )


def preparation_command(
    *,
    corpus: str,
    vocab: str,
    paths: JobPaths,
    pods: int,
    cpus_per_pod: int,
    args: Mapping[str, Any],
    work_dir: str,
) -> list[str]:
    """The container command (no shell: Python is PID 1 and gets SIGTERM itself)."""
    return [
        "python",
        "-m",
        PREPARE_INDEXED,
        "--completions",
        str(pods),
        "--work_dir",
        work_dir,
        "--marker",
        paths.dataset_marker,
        "--input",
        check_fsx_path("corpus", corpus),
        "--vocab",
        check_fsx_path("vocab", vocab),
        "--output_dir",
        paths.data_dir,
        "--num_workers",
        str(cpus_per_pod),
        "--no_progress",
        *check_settings(args),
    ]


def _spread(job_name: str) -> dict[str, Any]:
    """On the Trainium nodes, the Job's pods spread evenly over them (maxSkew 1)."""
    return {
        **trainium_placement(),
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": {"batch.kubernetes.io/job-name": job_name}},
            }
        ],
    }


def preparation_job(
    *,
    name: str,
    namespace: str,
    image: str,
    command: list[str],
    pods: int,
    cpus_per_pod: int,
    claim_name: str,
    service_account: str,
    on_preparation_nodes: bool = False,
) -> dict[str, Any]:
    """The batch/v1 Indexed Job: on the Trainium nodes, spread evenly; or with
    ``on_preparation_nodes`` on the CPU nodes Karpenter launches for it, packed (Karpenter takes a
    preferred spread as required until a pod fails to fit: kubernetes-sigs/karpenter v1.14.1
    pkg/controllers/provisioning/scheduling/scheduler.go L84-85, preferences.go L38-44, L90-92, so
    a spread would launch a node per pod)."""
    labels = {"app.kubernetes.io/name": "dataset-preparation"}
    resources = {"cpu": str(cpus_per_pod), "memory": f"{cpus_per_pod * MEMORY_GIB_PER_CPU}Gi"}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": {
            "completionMode": "Indexed",
            "completions": pods,
            "parallelism": pods,  # all at once: the pods wait for each other
            "backoffLimitPerIndex": 2,
            "maxFailedIndexes": 0,  # one index out of retries fails the Job and stops the rest
            "podFailurePolicy": {
                "rules": [
                    {
                        "action": "FailJob",
                        "onExitCodes": {
                            "containerName": CONTAINER,
                            "operator": "In",
                            "values": [USAGE_ERROR_EXIT_CODE],
                        },
                    },
                    {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
                ]
            },
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {
                    **pod_identity(service_account),
                    "securityContext": pod_security_context(),
                    **(preparation_node_placement() if on_preparation_nodes else _spread(name)),
                    # Work files go to FSx beside the output.
                    "containers": [
                        dataset_container(
                            name=CONTAINER,
                            image=image,
                            command=command,
                            resources={"requests": dict(resources), "limits": dict(resources)},
                        )
                    ],
                    "volumes": dataset_volumes(claim_name),
                },
            },
        },
    }


def _waiting_beside(c: Any) -> Resources:
    """What waits on a Trainium nodegroup's node beside the preparation pods: phase 2's staging
    pod, created at deploy, which waits there for phase 1's shards (``training_phases=both``)."""
    if c.training_phases != "both":
        return NOTHING_BESIDE
    return Resources.of_requests(STAGING_RESOURCES["requests"], pods=1)


def validate_preparation_config(c: Any) -> None:
    """The ``preparation_*`` fields of ``PlatformConfig``, with the construct's rules."""
    checks.flag("preparation_enabled", c.preparation_enabled)
    if c.preparation_enabled and not c.training_enabled:
        raise ConfigError(
            "preparation_enabled",
            True,
            "the prepared set is the training job's dataset: set training_enabled=true too",
        )
    check_fsx_path("preparation_corpus", c.preparation_corpus)
    check_fsx_path("preparation_vocab", c.preparation_vocab)
    try:
        # Sizes are checked against the nodes (and the DaemonSets this configuration puts
        # there) only when the Job is deployed.
        check_pods(c.preparation_pods, c.preparation_cpus_per_pod)
        if c.preparation_enabled:
            daemons = total(configured_node_daemons(c))
            if c.trainium_capacity == "karpenter":
                check_preparation_nodes(c.preparation_pods, c.preparation_cpus_per_pod, daemons=daemons)
            else:
                check_pods(
                    c.preparation_pods,
                    c.preparation_cpus_per_pod,
                    c.facts,
                    c.desired_nodes,
                    daemons=daemons,
                    beside=_waiting_beside(c),
                )
        check_settings(c.preparation_args)
    except ConfigError as err:
        raise ConfigError(f"preparation_{err.field_name}", err.value, err.fix) from None


def _check_size(
    pods: int,
    cpus_per_pod: int,
    facts: InstanceFacts | None,
    nodes: int | None,
    *,
    on_preparation_nodes: bool,
) -> None:
    """The pods fit where they run, all at once (:func:`check_preparation_nodes`, :func:`check_pods`)."""
    if on_preparation_nodes:
        check_preparation_nodes(pods, cpus_per_pod)
    else:
        check_pods(pods, cpus_per_pod, facts, nodes)


class DatasetPreparation(DatasetJob):
    """Applies the preparation Job (see :class:`~trainium_eks.jobs.dataset_job.DatasetJob` for the props
    it shares with :class:`~trainium_eks.jobs.dataset_staging.DatasetStaging`).

    Attributes: job_name, work_dir, manifest, job (the Job as a dict).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: AnyCluster,
        namespace: str,
        image: str,
        image_key: str,
        paths: JobPaths,
        claim_name: str,
        service_account: str,
        corpus: str = "fsx:/dataset/corpus",
        vocab: str = "fsx:/dataset/vocab.txt",
        pods: int = 4,
        cpus_per_pod: int = 16,
        args: Mapping[str, Any] | None = None,
        facts: InstanceFacts | None = None,
        nodes: int | None = None,
        on_preparation_nodes: bool = False,
        depends_on: Sequence[IConstruct] = (),
    ) -> None:
        """
        Args:
            corpus: ``fsx:/<path>`` of the text corpus (a file or a folder). Default
                "fsx:/dataset/corpus" (under the S3 import of ``fsx_s3_import_uri``).
            vocab: ``fsx:/<path>`` of the WordPiece vocab.txt. Default "fsx:/dataset/vocab.txt".
            pods: Indexed Job completions (= parallelism). Default 4.
            cpus_per_pod: CPU request = limit and worker processes per pod (memory: 2 GiB per
                CPU). Default 16.
            args: more ``prepare_data`` settings, see :data:`SETTING_FLAGS`. Default None: the
                tool's defaults (seq 128, 20 predictions, dupe factor 5, seed 12345).
            facts, nodes: the Trainium node type and count; given, the pods are checked to fit
                on them (without ``on_preparation_nodes``). Default None: not checked.
            on_preparation_nodes: run on the CPU nodes of :class:`~trainium_eks.nodes.node_pool.TrainiumNodePool`'s
                ``preparation`` NodePool, checked to fit (:func:`check_preparation_nodes`). Default False.

        The other props: :class:`~trainium_eks.jobs.dataset_job.DatasetJobProps`.
        """
        super().__init__(scope, id)
        cluster = require_cluster(cluster)
        self.paths = paths
        args = dict(args or {})
        _check_size(pods, cpus_per_pod, facts, nodes, on_preparation_nodes=on_preparation_nodes)
        settings = {"corpus": corpus, "vocab": vocab, "pods": pods, "args": args, "data_dir": paths.data_dir}
        # A work folder per settings: a changed spec never meets the leftovers of another run.
        self.work_dir = posixpath.join(
            posixpath.dirname(paths.data_dir),
            f".{posixpath.basename(paths.data_dir)}-work-{spec_digest(settings)}",
        )
        command = preparation_command(
            corpus=corpus,
            vocab=vocab,
            paths=paths,
            pods=pods,
            cpus_per_pod=cpus_per_pod,
            args=args,
            work_dir=self.work_dir,
        )
        self._apply_job(
            "prepare-dataset",
            lambda name, job_image: preparation_job(
                name=name,
                namespace=namespace,
                image=job_image,
                command=command,
                pods=pods,
                cpus_per_pod=cpus_per_pod,
                claim_name=claim_name,
                service_account=service_account,
                on_preparation_nodes=on_preparation_nodes,
            ),
            draft_name="prepare",
            cluster=cluster,
            image=image,
            image_key=image_key,
            depends_on=depends_on,
        )
