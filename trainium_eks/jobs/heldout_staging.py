"""Held-out staging: a Kubernetes Job that makes a phase's held-out set on FSx, once the phase's
shards and their vocabulary are there, so that the run reports its quality.

The pod runs ``python -m training.dataprep.heldout`` (training image) under the dataset pods'
program (:mod:`trainium_job.dataset_runner`): it waits, bounded, for the phase's shard set (its
staging Job writes the marker after the ``vocab.txt`` beside the shards), downloads
:data:`PG19_TEST_PARQUET`, turns its books into the data tool's input and makes a shard set of the
phase's shape with the shards' vocabulary and casing into ``<data_dir>-heldout``, with its
manifest, then the marker. It retries like the staging Job, and writes the set's failed marker when
it gives up. Idempotent: with the marker there the pod exits at once. The Job is named
``heldout-<digest>`` after its content.

The training pods never wait for it: the trainer evaluates from the first evaluation step that
finds the set (``training.trainer.pretrain.arrived_held_out``), so a set that comes late, or not at
all, costs evaluations, not node-hours.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from typing import Any

from constructs import Construct, IConstruct

from trainium_job.dataset_runner import MODULE as RUNNER
from trainium_job.dataset_runner import DatasetRun
from trainium_job.entry_points import HELDOUT
from trainium_job.errors import ConfigError
from trainium_job.paths import DATA_MOUNT, JobPaths
from trainium_job.security import pod_security_context
from trainium_job.spec import BertJobSpec, ScriptArg
from trainium_job.waits import Wait

from .._training.trainer.cli import build_parser
from ..arguments import AnyCluster, require_cluster
from .dataset_job import (
    DatasetJob,
    dataset_container,
    dataset_node_placement,
    dataset_volumes,
    pod_identity,
    trainium_placement,
)
from .dataset_staging import (
    STAGING_ATTEMPTS,
    STAGING_BACKOFF_S,
    STAGING_POD_RETRIES,
    STAGING_RESOURCES,
    dataset_job_env,
    final_failure_policy,
)

#: The held-out text: PG-19's test split (DeepMind's PG-19, Apache-2.0: 100 Project Gutenberg books
#: published before 1919, 6,966,499 words by google-deepmind/pg19's README; 40,482,852 bytes of
#: text by the Hugging Face ``pg19`` card), as one Parquet file with the PG-19 loader's columns,
#: pinned to a revision of the Hugging Face dataset repository ``emozilla/pg19-test`` so every
#: deploy reads the same books (24.9 MB; the same file is in ``emozilla/pg19`` at b7bca680). Not
#: Wikipedia, which the public shards are made of; what may still overlap is said in
#: :mod:`training.dataprep.heldout`, which leaves the Encyclopaedia Britannica out.
PG19_TEST_PARQUET = (
    "https://huggingface.co/datasets/emozilla/pg19-test/resolve/"
    "36a9d10c307274ab095e8bcf1d7529d4e9892403/data/test-00000-of-00001-29a571947c0b5ccc.parquet"
)
#: A held-out set is ``<data_dir><suffix>``, beside its phase's shards.
HELDOUT_SUFFIX = "-heldout"
#: The data tool's processes in the pod: the CPUs its requests hold.
HELDOUT_WORKERS = int(STAGING_RESOURCES["requests"]["cpu"])
_HTTPS = re.compile(r"^https://[A-Za-z0-9.-]+/[A-Za-z0-9._~/%-]+$")


def heldout_paths(paths: JobPaths) -> JobPaths:
    """Where the held-out set of the shard set at ``paths.data_dir`` lives, its marker and (the
    ``dataset_failed`` property) its failed marker; the cache and run directories are the phase's."""
    data_dir = f"{paths.data_dir}{HELDOUT_SUFFIX}"
    return JobPaths(
        data_dir=data_dir,
        dataset_marker=f"{data_dir}/.staged",
        cache_dir=paths.cache_dir,
        output_dir=paths.output_dir,
    )


def eval_samples(spec: BertJobSpec) -> int:
    """Held-out samples each evaluation of phase ``spec`` reads: its ``--eval_samples``, else the
    trainer's default (10,000, MLPerf's count)."""
    given: ScriptArg | None = spec.extra_args.get("eval_samples")
    return int(given if given is not None else build_parser().get_default("eval_samples"))


def check_heldout(source: str, vocab: str, shape: tuple[int, int], samples: int) -> None:
    """The construct's props: an ``https://`` source, a ``vocab.txt`` on FSx, a sample shape the
    data tool takes, and at least one sample."""
    if not _HTTPS.match(source):
        raise ConfigError(
            "HeldOutStaging.source", source, "give an https:// URL of a Parquet file, pinned to a revision"
        )
    if not vocab.startswith(f"{DATA_MOUNT}/") or ".." in vocab.split("/"):
        raise ConfigError(
            "HeldOutStaging.vocab",
            vocab,
            f"give the shards' vocab.txt as the pods see it, under {DATA_MOUNT}/",
        )
    tokens, predictions = shape
    if not (5 <= tokens and 1 <= predictions <= tokens - 3):
        raise ConfigError(
            "HeldOutStaging.shape", shape, "give (tokens, masked predictions) of the phase, e.g. (128, 20)"
        )
    if samples < 1:
        raise ConfigError(
            "HeldOutStaging.samples", samples, "give the samples an evaluation reads, e.g. 10000"
        )


def heldout_run(
    *,
    source: str,
    paths: JobPaths,
    vocab: str,
    shape: tuple[int, int],
    samples: int,
    waits: Sequence[Wait] = (),
) -> DatasetRun:
    """What the pod's program runs: ``waits`` first, then the held-out tool on the phase at ``paths``."""
    held = heldout_paths(paths)
    tokens, predictions = shape
    command = (
        "python",
        "-m",
        HELDOUT,
        "--source",
        source,
        "--data_dir",
        paths.data_dir,
        "--vocab",
        vocab,
        "--output_dir",
        held.data_dir,
        "--marker",
        held.dataset_marker,
        "--max_seq_len",
        str(tokens),
        "--max_pred_len",
        str(predictions),
        "--samples",
        str(samples),
        "--num_workers",
        str(HELDOUT_WORKERS),
    )
    return DatasetRun(
        command=command,
        failed=held.dataset_failed,
        waits=tuple(waits),
        attempts=STAGING_ATTEMPTS,
        backoff_s=STAGING_BACKOFF_S,
    )


def heldout_job(
    *,
    name: str,
    namespace: str,
    image: str,
    run: DatasetRun,
    claim_name: str,
    service_account: str,
    on_dataset_node: bool,
) -> dict[str, Any]:
    """The batch/v1 Job: the staging Job's pod (requests, placement, retries, failure policy)
    around ``run``."""
    container = dataset_container(
        name="heldout",
        image=image,
        command=["python", "-m", RUNNER, run.dumps()],
        resources=copy.deepcopy(STAGING_RESOURCES),
    )
    container["env"] = [*container["env"], *dataset_job_env()]
    labels = {"app.kubernetes.io/name": "heldout-staging"}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": {
            "backoffLimit": STAGING_POD_RETRIES,
            "podFailurePolicy": final_failure_policy(),
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {
                    **pod_identity(service_account),
                    **(dataset_node_placement() if on_dataset_node else trainium_placement()),
                    "containers": [container],
                    "securityContext": pod_security_context(),
                    "volumes": dataset_volumes(claim_name),
                },
            },
        },
    }


class HeldOutStaging(DatasetJob):
    """Applies the held-out staging Job of one phase (see the module docstring; the props it shares
    with the other dataset constructs: :class:`~trainium_eks.jobs.dataset_job.DatasetJobProps`,
    whose ``paths`` are the phase's).

    Attributes: job_name, manifest, job (the Job as a dict), paths (the held-out set's:
    :func:`heldout_paths`), source.
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
        vocab: str,
        shape: tuple[int, int],
        samples: int,
        source: str = PG19_TEST_PARQUET,
        on_dataset_node: bool = False,
        waits: Sequence[Wait] = (),
        depends_on: Sequence[IConstruct] = (),
    ) -> None:
        """
        Args:
            paths: the phase's (its shards at ``data_dir``); the held-out set goes beside them.
            vocab: the shards' ``vocab.txt`` as the pods see it (``BertJobSpec.vocab``).
            shape: the phase's (``--seq_len``, ``--max_pred_len``).
            samples: the least samples the set holds (the phase's ``--eval_samples``).
            source: the books (a Parquet file of PG-19's columns). Default :data:`PG19_TEST_PARQUET`.
            on_dataset_node: run on the ``dataset`` NodePool's small node (``trainium_capacity=karpenter``),
                not on a Trainium node. Default False.
            waits: what must be there first (the phase's shard set), each bounded. Default ``()``.

        The other props: :class:`~trainium_eks.jobs.dataset_job.DatasetJobProps`.
        """
        super().__init__(scope, id)
        cluster = require_cluster(cluster)
        check_heldout(source, vocab, shape, samples)
        self.paths = heldout_paths(paths)
        self.source = source
        run = heldout_run(source=source, paths=paths, vocab=vocab, shape=shape, samples=samples, waits=waits)
        self._apply_job(
            "heldout",
            lambda name, job_image: heldout_job(
                name=name,
                namespace=namespace,
                image=job_image,
                run=run,
                claim_name=claim_name,
                service_account=service_account,
                on_dataset_node=on_dataset_node,
            ),
            draft_name="heldout",
            cluster=cluster,
            image=image,
            image_key=image_key,
            depends_on=depends_on,
        )


def heldout_dir(paths: JobPaths) -> str:
    """The held-out set's directory, for the phase's ``--eval_dir``."""
    return heldout_paths(paths).data_dir
