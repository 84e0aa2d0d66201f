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
nothing. A failed download leaves no marker; the pod's program
(:mod:`trainium_job.dataset_runner`) tries again in a fresh temporary directory (replacing
whatever an interrupted attempt left), and after its last attempt writes the shard set's failed
marker (``JobPaths.dataset_failed``) naming this Job and why: the job's submitter and the training
pods waiting for these shards end at once with that reason.
"""

from __future__ import annotations

import copy
import posixpath
import re
import shlex
from collections.abc import Sequence
from typing import Any

from constructs import Construct, IConstruct

from trainium_job.dataset_runner import JOB_NAME_ENV, DatasetRun
from trainium_job.dataset_runner import MODULE as RUNNER
from trainium_job.entry_points import IMPORT_NEURON
from trainium_job.errors import ConfigError
from trainium_job.exit_codes import DEADLINE_EXIT_CODE
from trainium_job.paths import DATA_MOUNT, SHARD_PATTERN, JobPaths
from trainium_job.security import pod_security_context
from trainium_job.submission import JOB_NAME_LABEL
from trainium_job.waits import Wait

from ..arguments import AnyCluster, require_cluster
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
#: The public seq-512 copy of the same shards (phase 2), beside :data:`PUBLIC_BERT_SHARDS` in the
#: bucket the Neuron BERT tutorial names for phase 2 (aws-neuron-sdk
#: ``frameworks/torch/torch-neuronx/tutorials/training/bert.rst``).
PUBLIC_BERT_SHARDS_512 = (
    "s3://neuron-s3/training_datasets/bert_pretrain_wikicorpus_tokenized_hdf5/"
    "bert_pretrain_wikicorpus_tokenized_hdf5_seqlen512.tar"
)
#: (tokens, masked predictions) per sample of :data:`PUBLIC_BERT_SHARDS_512`: NVIDIA's phase-2
#: set (``create_datasets_from_start.sh``: ``--max_seq_length 512 --max_predictions_per_seq 80``).
PUBLIC_BERT_SHAPE_512 = (512, 80)
#: Source -> (tokens, predictions) of every public shard set synth knows.
PUBLIC_BERT_SHAPES = {PUBLIC_BERT_SHARDS: PUBLIC_BERT_SHAPE, PUBLIC_BERT_SHARDS_512: PUBLIC_BERT_SHAPE_512}
#: The vocabulary of the public shards: NVIDIA's ``create_datasets_from_start.sh`` tokenizes with
#: Google's ``uncased_L-24_H-1024_A-16/vocab.txt``, which Hugging Face hosts as
#: ``google-bert/bert-large-uncased``'s ``vocab.txt`` (30,522 tokens, lower-cased); pinned to
#: the repository's revision 6da4b6a2 so every deploy downloads the same file.
PUBLIC_BERT_VOCAB = (
    "https://huggingface.co/google-bert/bert-large-uncased/resolve/"
    "6da4b6a26a1877e173fca3225479512db81a5e5b/vocab.txt"
)
#: Neuron's published BERT-large phase-1 result (the tutorial's ``ckpt_28125.pt``): a start for
#: ``training_phases=2`` without a day of phase 1.
NEURON_PHASE1_CHECKPOINT = (
    "s3://neuron-s3/training_checkpoints/pytorch/dp_bert_large_hf_pretrain/ckpt_28125.pt"
)
#: Bytes of each public source synth knows, for the review's staging time and the deadlines derived
#: from it (``trainium_eks.jobs.staging_eta``; ``make doctor`` reads the real ``ContentLength``
#: with an unsigned HeadObject, as staging reads the objects, and warns when the wait derived
#: from this figure is shorter than twice the staging time at the real size):
#:
#: * the seq-128 tar: "BERT phase1 pretraining uses a 50+ GB WikiCorpus dataset"
#:   (aws-neuron/aws-neuron-eks-samples ``dp_bert_hf_pretrain/README.md`` L389 at cecff9e; the
#:   only published figure, taken as its 50 GB);
#: * the seq-512 tar: no published size. Taken as the seq-128 tar's: the same corpus at 4 times the
#:   tokens per sample (512 against 128 ``int32`` ids, 80 against 20 predictions) and about a
#:   quarter of the samples;
#: * Neuron's phase-1 checkpoint: no published size. A ``torch.save`` of the model, its AdamW state
#:   and the scheduler (aws-neuron-samples ``dp_bert_large_hf_pretrain_hdf5.py`` L582-593 at
#:   2015d650): 336,226,108 float32 parameters and two float32 moments each, 12 bytes a parameter.
PUBLIC_SOURCE_BYTES = {
    PUBLIC_BERT_SHARDS: 50 * 10**9,
    PUBLIC_BERT_SHARDS_512: 50 * 10**9,
    NEURON_PHASE1_CHECKPOINT: 336_226_108 * 12,
}
#: The vocabulary's file name, beside the shards (the name ``BertTokenizer`` reads).
VOCAB_NAME = "vocab.txt"
#: Where the staging job puts an imported start checkpoint: ``/data/checkpoints/<name>``.
CHECKPOINTS_DIR = f"{DATA_MOUNT}/checkpoints"
#: The staging container's resources: a download and an unpack stream (the AWS CLI, tar).
STAGING_RESOURCES = {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"cpu": "4", "memory": "8Gi"}}
_S3 = re.compile(r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[^\s'\"]*)?$")
_FSX = re.compile(r"^fsx:/[A-Za-z0-9._/-]+$")
_HTTPS = re.compile(r"^https://[A-Za-z0-9.-]+/[A-Za-z0-9._~/%-]+$")
#: A Neuron tutorial checkpoint file: ``ckpt_<step>.pt`` (its step is in the name).
_NEURON_CKPT = re.compile(r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/(?:[^\s'\"]*/)?ckpt_[0-9]+\.pt$")


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


def check_vocab_source(key: str, source: str) -> None:
    """An ``https://`` URL, an S3 object or a file on FSx (``""``: none)."""
    if source and not (
        _HTTPS.match(source) or (_S3.match(source) and not source.endswith("/")) or _FSX.match(source)
    ):
        raise ConfigError(
            key,
            source,
            "give https://host/path pinned to a revision, s3://bucket/key or fsx:/path of vocab.txt",
        )
    if _FSX.match(source) and ".." in source.split("/"):
        raise ConfigError(key, source, "a path on FSx without '..'")


def check_start_source(key: str, source: str) -> None:
    """A start checkpoint: a Neuron tutorial ``s3://.../ckpt_<step>.pt`` or an ``fsx:/`` directory."""
    if _NEURON_CKPT.match(source):
        return
    if _FSX.match(source) and ".." not in source.split("/"):
        return
    raise ConfigError(
        key,
        source,
        "give s3://bucket/.../ckpt_<step>.pt (a Neuron tutorial checkpoint, e.g. "
        f"{NEURON_PHASE1_CHECKPOINT}) or fsx:/path of a checkpoint or run directory (fsx:/runs/<run>)",
    )


def start_path(source: str) -> str:
    """Where the pods find the start checkpoint ``source`` names (checked by
    :func:`check_start_source`): an import's directory under :data:`CHECKPOINTS_DIR`, or the path on FSx."""
    if source.startswith("fsx:"):
        return DATA_MOUNT + source[len("fsx:") :]
    name = (
        posixpath.basename(posixpath.dirname(source)) + "-" + posixpath.basename(source).removesuffix(".pt")
    )
    return f"{CHECKPOINTS_DIR}/{re.sub(r'[^A-Za-z0-9._-]', '-', name)}"


def vocab_file(paths: JobPaths) -> str:
    """Where the staging job puts the vocabulary of the shard set at ``paths.data_dir``."""
    return f"{paths.data_dir}/{VOCAB_NAME}"


def vocab_lines(source: str, paths: JobPaths) -> list[str]:
    """Shell lines: ``source`` copied to ``<data_dir>/vocab.txt`` once (the export's vocabulary),
    checked to be a BERT vocabulary (its ``[CLS]`` and ``[MASK]`` tokens)."""
    dest = shlex.quote(vocab_file(paths))
    src = shlex.quote(source)
    if source.startswith("https://"):
        download = "import sys, urllib.request; urllib.request.urlretrieve(*sys.argv[1:])"
        fetch = f'python -c {shlex.quote(download)} {src} "$tmp/vocab"'
    elif source.startswith("s3://"):
        fetch = f'aws s3 cp --no-sign-request --only-show-errors {src} "$tmp/vocab"'
    else:
        fetch = f'cp {shlex.quote(DATA_MOUNT + source[len("fsx:") :])} "$tmp/vocab"'
    return [
        f"if [ ! -f {dest} ]; then",
        f"  {fetch}",
        "  if ! grep -qx '\\[CLS\\]' \"$tmp/vocab\" || ! grep -qx '\\[MASK\\]' \"$tmp/vocab\"; then",
        f"    echo 'vocab_source {source}: not a BERT vocab.txt (no [CLS] or [MASK] line)' >&2; exit 1",
        "  fi",
        f'  mv "$tmp/vocab" {dest}',
        "fi",
    ]


def start_lines(source: str, *, model: str) -> list[str]:
    """Shell lines: the start checkpoint ``source`` made available at :func:`start_path`, once.

    A Neuron tutorial checkpoint is downloaded and imported (``training.trainer.import_neuron``,
    which verifies what it writes); a path on FSx must exist. Either way a missing start fails
    this Job with the path, and the shard set's marker (which the training pods wait for) is not
    written."""
    dest = start_path(source)
    if source.startswith("fsx:"):
        return [
            f"if [ ! -d {shlex.quote(dest)} ]; then",
            f"  echo 'phase2_init_from {source}: no directory {dest} on FSx' >&2; exit 1",
            "fi",
        ]
    done = shlex.quote(f"{dest}/.imported")
    # Kept on FSx beside the import, with its digest once whole: a retry after a failed import
    # reads it again instead of downloading the file again (4 GB for Neuron's).
    download = shlex.quote(f"{dest}.download/{posixpath.basename(source)}")
    digest = shlex.quote(f"{dest}.download/{posixpath.basename(source)}.sha256")
    return [
        f"if [ ! -f {done} ]; then",
        f"  mkdir -p {shlex.quote(dest + '.download')}",
        f"  if [ ! -f {digest} ] || ! sha256sum --check --status {digest}; then",
        f"    if ! aws s3 cp --no-sign-request --only-show-errors {shlex.quote(source)} {download}; then",
        f"      echo 'phase2_init_from {source}: could not download it' >&2; exit 1",
        "    fi",
        f"    sha256sum {download} > {digest}",
        "  fi",
        f"  python -m {IMPORT_NEURON} {download} {shlex.quote(dest)} --model {shlex.quote(model)}",
        f"  rm -rf {shlex.quote(dest + '.download')}; touch {done}",
        "fi",
    ]


def staging_script(
    source: str,
    paths: JobPaths,
    *,
    vocab: str = "",
    start: str = "",
    model: str = "large",
) -> str:
    """The shell script of the staging container (runs as a Job; see the module docstring).

    ``vocab``: a vocabulary source copied beside the shards (:func:`vocab_lines`); ``start``: a
    start checkpoint of ``model`` made available (:func:`start_lines`). Both run before the
    marker is written, and also when the shards were staged by an earlier deploy."""
    check_source(source)
    marker = shlex.quote(paths.dataset_marker)
    extras = [
        *(vocab_lines(vocab, paths) if vocab else []),
        *(start_lines(start, model=model) if start else []),
    ]
    if not extras:
        return (
            "\n".join(
                [
                    "set -euo pipefail",
                    f"if [ -f {marker} ]; then echo 'dataset already staged'; exit 0; fi",
                    *_workspace_lines(paths),
                    *_shard_lines(source, paths),
                    f'echo "$count shards" > {marker}',
                    'echo "staged $count shards"',
                ]
            )
            + "\n"
        )
    lines = [
        "set -euo pipefail",
        *_workspace_lines(paths),
        f"if [ -f {marker} ]; then echo 'dataset already staged'; staged=1; else staged=0",
        *(f"  {line}" for line in _shard_lines(source, paths)),
        "fi",
        *extras,
        f'if [ "$staged" = 0 ]; then echo "$count shards" > {marker}; echo "staged $count shards"; fi',
    ]
    return "\n".join(lines) + "\n"


def _workspace_lines(paths: JobPaths) -> list[str]:
    """A fresh temporary directory beside the dataset directory, removed on exit."""
    parent = shlex.quote(posixpath.dirname(paths.data_dir))
    return [
        f"mkdir -p {parent}",
        f"tmp=$(mktemp -d {parent}/.staging-XXXXXX)",
        "trap 'rm -rf \"$tmp\"' EXIT",
        'mkdir "$tmp/set" "$tmp/download"',
    ]


def _shard_lines(source: str, paths: JobPaths) -> list[str]:
    """The shards fetched into ``$tmp/set``, counted, given a manifest and renamed into place."""
    dest = shlex.quote(paths.data_dir)
    src = shlex.quote(source)
    pattern = shlex.quote(SHARD_PATTERN)
    lines = []
    if source.startswith("fsx:"):
        lines.append(f"src={shlex.quote(DATA_MOUNT + source[len('fsx:') :])}")
        lines.append(f'find "$src" -name {pattern} -exec ln -sf -t "$tmp/set" {{}} +')
    elif source.endswith(".tar"):
        # No capabilities (CHOWN dropped): keep the archive's modes, not its owners. The CLI's
        # error is the line that says why (the pod program names it when it gives up), not tar's.
        lines += [
            f'if ! aws s3 cp --no-sign-request --only-show-errors {src} - 2> "$tmp/aws.err" '
            f'| tar -x --no-same-owner -C "$tmp/download"; then',
            '  reason=$(tail -n 1 "$tmp/aws.err")',
            f'  echo "dataset_source {source}: ${{reason:-the archive did not unpack}}" >&2; exit 1',
            "fi",
        ]
        lines.append(f'find "$tmp/download" -name {pattern} -exec mv -t "$tmp/set" {{}} +')
    else:
        lines += [
            f'if ! aws s3 sync --no-sign-request --only-show-errors {src} "$tmp/download" 2> "$tmp/aws.err"; then',
            f'  echo "dataset_source {source}: $(tail -n 1 "$tmp/aws.err")" >&2; exit 1',
            "fi",
        ]
        lines.append(f'find "$tmp/download" -name {pattern} -exec mv -t "$tmp/set" {{}} +')
    return [
        *lines,
        f'count=$(find "$tmp/set" -maxdepth 1 -name {pattern} | wc -l)',
        f"if [ \"$count\" -eq 0 ]; then echo 'no {SHARD_PATTERN} shards found' >&2; exit 1; fi",
        # The public shards come without a manifest: make one (counts, shapes, SHA-256).
        f'python -m training.dataprep.shard_format write "$tmp/set" --source {src}',
        # An interrupted earlier attempt may have left a directory without the marker.
        f'if [ -e {dest} ]; then mv {dest} "$tmp/replaced"; fi',
        f'mv "$tmp/set" {dest}',
    ]


#: Tries of the staging script in one pod (:mod:`trainium_job.dataset_runner`), and seconds between.
STAGING_ATTEMPTS = 3
STAGING_BACKOFF_S = 60
#: Pods the Job retries after a pod-level failure (an eviction, a node lost): the program's own
#: attempts cover the download's failures, and its give-up is final (the failure policy below).
STAGING_POD_RETRIES = 2


def staging_run(
    source: str,
    paths: JobPaths,
    *,
    vocab: str = "",
    start: str = "",
    model: str = "large",
    waits: Sequence[Wait] = (),
) -> DatasetRun:
    """What the staging container's program runs: ``waits`` first, then the staging script."""
    return DatasetRun(
        command=("bash", "-c", staging_script(source, paths, vocab=vocab, start=start, model=model)),
        failed=paths.dataset_failed,
        waits=tuple(waits),
        attempts=STAGING_ATTEMPTS,
        backoff_s=STAGING_BACKOFF_S,
    )


def dataset_job_env() -> list[dict[str, Any]]:
    """The Job's name (``trainium_job.dataset_runner.JOB_NAME_ENV``), from the pod's label."""
    return [
        {
            "name": JOB_NAME_ENV,
            "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{JOB_NAME_LABEL}']"}},
        }
    ]


def final_failure_policy() -> dict[str, Any]:
    """The program's give-up (``DEADLINE_EXIT_CODE``) fails the Job: no pod retries it."""
    return {
        "rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [DEADLINE_EXIT_CODE]}}]
    }


def staging_job(
    *,
    name: str,
    namespace: str,
    image: str,
    source: str,
    paths: JobPaths,
    claim_name: str,
    service_account: str,
    vocab: str = "",
    start: str = "",
    model: str = "large",
    on_dataset_node: bool = False,
    waits: Sequence[Wait] = (),
) -> dict[str, Any]:
    """The batch/v1 Job. It runs on a Trainium node, which pulls the training image anyway, or
    with ``on_dataset_node`` on the small node Karpenter launches for it; ``waits`` first."""
    run = staging_run(source, paths, vocab=vocab, start=start, model=model, waits=waits)
    container = dataset_container(
        name="stage",
        image=image,
        command=["python", "-m", RUNNER, run.dumps()],
        resources=copy.deepcopy(STAGING_RESOURCES),
    )
    container["env"] = [*container["env"], *dataset_job_env()]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": "dataset-staging"},
        },
        "spec": {
            "backoffLimit": STAGING_POD_RETRIES,
            "podFailurePolicy": final_failure_policy(),
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/name": "dataset-staging"}},
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


class DatasetStaging(DatasetJob):
    """Applies the staging Job (see :class:`~trainium_eks.jobs.dataset_job.DatasetJob` for the props it
    shares with :class:`~trainium_eks.jobs.dataset_preparation.DatasetPreparation`).

    Attributes: job_name, manifest, job (the Job as a dict), paths (the shard set's).
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
        vocab: str = "",
        start: str = "",
        model: str = "large",
        on_dataset_node: bool = False,
        waits: Sequence[Wait] = (),
        depends_on: Sequence[IConstruct] = (),
    ) -> None:
        """
        Args:
            source: where the shards come from, see the module docstring. Default
                :data:`PUBLIC_BERT_SHARDS` (the public bucket needs no sign-in).
            vocab: the shards' ``vocab.txt`` to put beside them (:func:`check_vocab_source`).
                Default "": none.
            start: a start checkpoint to make available at :func:`start_path` before the
                marker (:func:`check_start_source`), of model config ``model``. Default "": none.
            on_dataset_node: run on the ``dataset`` NodePool's small node
                (``trainium_capacity=karpenter``: :class:`~trainium_eks.nodes.node_pool.TrainiumNodePool`),
                not on a Trainium node. Default False.
            waits: what must be there before it stages (phase 2's staging waits for phase 1's
                shards), each bounded. Default ``()``.

        The other props: :class:`~trainium_eks.jobs.dataset_job.DatasetJobProps`.
        """
        super().__init__(scope, id)
        cluster = require_cluster(cluster)
        self.paths = paths
        check_source(source)
        check_vocab_source("vocab_source", vocab)
        if start:
            check_start_source("phase2_init_from", start)
        self._apply_job(
            "stage-dataset",
            lambda name, job_image: staging_job(
                name=name,
                namespace=namespace,
                image=job_image,
                source=source,
                vocab=vocab,
                start=start,
                model=model,
                paths=paths,
                claim_name=claim_name,
                service_account=service_account,
                on_dataset_node=on_dataset_node,
                waits=waits,
            ),
            draft_name="stage",
            cluster=cluster,
            image=image,
            image_key=image_key,
            depends_on=depends_on,
        )
