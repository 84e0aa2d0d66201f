"""Dataset staging: a Kubernetes Job that puts the training shards on FSx once, then marks them.

Sources:
- ``s3://.../*.tar`` (default: the public BERT wikicorpus seq-128 shards, no sign-in needed):
  streamed from S3 and unpacked, every ``*_training_*.hdf5`` moved into the dataset directory.
- ``s3://bucket/prefix/``: the shards copied with ``aws s3 sync``.
- ``fsx:/<path>``: already on the file system (e.g. the FSx S3 data repository association's
  ``/dataset``); the job only checks the shards are there and writes the marker.

The shards are gathered in a temporary directory, given a manifest (``training.dataprep.shard_format``:
counts, shapes, SHA-256; the trainer takes a directory only with one), and renamed into the
dataset directory as a whole. Idempotent: a marker file (``<data_dir>/.staged``) is written last;
a job that finds it exits at once, so a re-deploy or a second job on the same dataset downloads
nothing. A failed download leaves no marker, and the Job's retries start over in a fresh
temporary directory (replacing whatever an interrupted attempt left).
"""

from __future__ import annotations

import copy
import posixpath
import re
import shlex
from collections.abc import Sequence
from typing import Any

from constructs import Construct, IConstruct

from trainium_job.errors import ConfigError
from trainium_job.paths import DATA_MOUNT, SHARD_PATTERN, JobPaths
from trainium_job.security import pod_security_context

from .arguments import AnyCluster, require_cluster
from .dataset_job import (
    DatasetJob,
    dataset_container,
    dataset_node_placement,
    dataset_volumes,
    pod_identity,
    trainium_placement,
)

#: The reference's public copy of the tokenized BERT shards (sequence length 128).
PUBLIC_BERT_SHARDS = (
    "s3://neuron-s3/training_datasets/bert_pretrain_wikicorpus_tokenized_hdf5/"
    "bert_pretrain_wikicorpus_tokenized_hdf5_seqlen128.tar"
)
#: (tokens, masked predictions) per sample of :data:`PUBLIC_BERT_SHARDS`: ``input_ids`` [N, 128]
#: and ``masked_lm_positions`` [N, 20]. The archive is named ``..._seqlen128``; the shards are
#: NVIDIA's phase-1 set (NVIDIA/DeepLearningExamples PyTorch/LanguageModeling/BERT
#: ``data/create_datasets_from_start.sh``: ``--max_seq_length 128 --max_predictions_per_seq 20``),
#: the layout the Neuron BERT pretraining tutorial and its EKS sample train on.
PUBLIC_BERT_SHAPE = (128, 20)
#: The staging container's resources: a download and an unpack stream (the AWS CLI, tar).
STAGING_RESOURCES = {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"cpu": "4", "memory": "8Gi"}}
_S3 = re.compile(r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[^\s'\"]*)?$")
_FSX = re.compile(r"^fsx:/[A-Za-z0-9._/-]+$")


def check_source(source: str) -> None:
    """An S3 tar, an S3 prefix or a path on FSx (see the module docstring)."""
    if not (_S3.match(source) or _FSX.match(source)):
        raise ConfigError(
            "dataset_source",
            source,
            "give s3://bucket/key.tar, s3://bucket/prefix/ or fsx:/path-on-the-file-system",
        )
    if _FSX.match(source) and ".." in source.split("/"):
        raise ConfigError("dataset_source", source, "a path on FSx without '..'")


def staging_script(source: str, paths: JobPaths) -> str:
    """The shell script of the staging container (runs as a Job; see the module docstring)."""
    check_source(source)
    dest, marker = shlex.quote(paths.data_dir), shlex.quote(paths.dataset_marker)
    src = shlex.quote(source)
    pattern = shlex.quote(SHARD_PATTERN)
    lines = [
        "set -euo pipefail",
        f"if [ -f {marker} ]; then echo 'dataset already staged'; exit 0; fi",
        f"mkdir -p {shlex.quote(posixpath.dirname(paths.data_dir))}",
        f"tmp=$(mktemp -d {shlex.quote(posixpath.dirname(paths.data_dir))}/.staging-XXXXXX)",
        "trap 'rm -rf \"$tmp\"' EXIT",
        'mkdir "$tmp/set" "$tmp/download"',
    ]
    if source.startswith("fsx:"):
        lines.append(f"src={shlex.quote(DATA_MOUNT + source[len('fsx:') :])}")
        lines.append(f'find "$src" -name {pattern} -exec ln -sf -t "$tmp/set" {{}} +')
    elif source.endswith(".tar"):
        # No capabilities (CHOWN dropped): keep the archive's modes, not its owners.
        lines.append(
            f'aws s3 cp --no-sign-request --only-show-errors {src} - | tar -x --no-same-owner -C "$tmp/download"'
        )
        lines.append(f'find "$tmp/download" -name {pattern} -exec mv -t "$tmp/set" {{}} +')
    else:
        lines.append(f'aws s3 sync --no-sign-request --only-show-errors {src} "$tmp/download"')
        lines.append(f'find "$tmp/download" -name {pattern} -exec mv -t "$tmp/set" {{}} +')
    lines += [
        f'count=$(find "$tmp/set" -maxdepth 1 -name {pattern} | wc -l)',
        f"if [ \"$count\" -eq 0 ]; then echo 'no {SHARD_PATTERN} shards found' >&2; exit 1; fi",
        # The public shards come without a manifest: make one (counts, shapes, SHA-256).
        f'python -m training.dataprep.shard_format write "$tmp/set" --source {src}',
        # An interrupted earlier attempt may have left a directory without the marker.
        f'if [ -e {dest} ]; then mv {dest} "$tmp/replaced"; fi',
        f'mv "$tmp/set" {dest}',
        f'echo "$count shards" > {marker}',
        'echo "staged $count shards"',
    ]
    return "\n".join(lines) + "\n"


def staging_job(
    *,
    name: str,
    namespace: str,
    image: str,
    source: str,
    paths: JobPaths,
    claim_name: str,
    service_account: str,
    on_dataset_node: bool = False,
) -> dict[str, Any]:
    """The batch/v1 Job. It runs on a Trainium node, which pulls the training image anyway, or
    with ``on_dataset_node`` on the small node Karpenter launches for it."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": "dataset-staging"},
        },
        "spec": {
            "backoffLimit": 3,
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/name": "dataset-staging"}},
                "spec": {
                    **pod_identity(service_account),
                    **(dataset_node_placement() if on_dataset_node else trainium_placement()),
                    "containers": [
                        dataset_container(
                            name="stage",
                            image=image,
                            command=["bash", "-c", staging_script(source, paths)],
                            resources=copy.deepcopy(STAGING_RESOURCES),
                        )
                    ],
                    "securityContext": pod_security_context(),
                    "volumes": dataset_volumes(claim_name),
                },
            },
        },
    }


class DatasetStaging(DatasetJob):
    """Applies the staging Job (see :class:`~trainium_eks.dataset_job.DatasetJob` for the props it
    shares with :class:`~trainium_eks.dataset_preparation.DatasetPreparation`).

    Attributes: job_name, manifest, job (the Job as a dict).
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
        source: str = PUBLIC_BERT_SHARDS,
        on_dataset_node: bool = False,
        depends_on: Sequence[IConstruct] = (),
    ) -> None:
        """
        Args:
            source: where the shards come from, see the module docstring. Default
                :data:`PUBLIC_BERT_SHARDS` (the public bucket needs no sign-in).
            on_dataset_node: run on the ``dataset`` NodePool's small node
                (``trainium_capacity=karpenter``: :class:`~trainium_eks.node_pool.TrainiumNodePool`),
                not on a Trainium node. Default False.

        The other props: :class:`~trainium_eks.dataset_job.DatasetJobProps`.
        """
        super().__init__(scope, id)
        cluster = require_cluster(cluster)
        check_source(source)
        self._apply_job(
            "stage-dataset",
            lambda name, job_image: staging_job(
                name=name,
                namespace=namespace,
                image=job_image,
                source=source,
                paths=paths,
                claim_name=claim_name,
                service_account=service_account,
                on_dataset_node=on_dataset_node,
            ),
            draft_name="stage",
            cluster=cluster,
            image=image,
            image_key=image_key,
            depends_on=depends_on,
        )
