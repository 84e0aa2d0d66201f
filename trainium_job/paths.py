"""Where a job keeps its inputs and outputs on the shared file system (FSx, mounted at /data)."""

from __future__ import annotations

from dataclasses import dataclass

#: Where the FSx claim is mounted in every pod.
DATA_MOUNT = "/data"
#: File names of a shard set (the data tool writes them, the staging job counts them, the trainer
#: reads them): the public BERT shards follow the same pattern.
SHARD_PATTERN = "*_training_*.hdf5"
SHARD_NAME = "{prefix}_training_{index}.hdf5"
#: The shard set's manifest, beside its shards.
MANIFEST_NAME = "manifest.json"
#: A run's restart ledger, in its output directory: one JSON line per ended attempt and per
#: training start (:mod:`trainium_job.restarts`).
RESTART_LEDGER = "restarts.jsonl"
#: Directory of the step watchdog's hang markers, in the run's output directory: one file per hung
#: rank, turned into ledger lines by the next reader (:func:`trainium_job.restarts.drain_hang_markers`).
HANG_MARKERS = "hang"
#: Written by the trainer, in the run's output directory, once the run reached its --max_steps
#: (JSON: step, max_steps, the final checkpoint): the worker script then skips the phase.
COMPLETE_MARKER = "COMPLETE"
#: Where a job's pods count what its nodes cost (``trainium_job.pod_program.spend``): one folder
#: per job, named after its first phase's run, beside the runs (not in one: a run directory that
#: exists says an attempt of the run began, and the spend is counted from the pod's start).
SPEND_ROOT = f"{DATA_MOUNT}/spend"
#: The run's Hugging Face folder (``training.trainer.export``), in its output directory: under
#: FSx's /runs, which the file system exports to ``fsx_s3_export_uri`` when one is set.
MODEL_DIR = "model"


@dataclass(frozen=True)
class JobPaths:
    """Where one job keeps its inputs and outputs on FSx (all under :data:`DATA_MOUNT`).

    Attributes:
        data_dir: directory of the ``*_training_*.hdf5`` shards.
        dataset_marker: file the staging job writes when ``data_dir`` is complete.
        cache_dir: Neuron compile cache of this job's cache set (never shared by two jobs
            running at once: the compiler's cache locking is per process, not per cluster).
        output_dir: checkpoints, TensorBoard events, metrics (kept across restarts and
            re-deploys: the script resumes from it).
    """

    data_dir: str
    dataset_marker: str
    cache_dir: str
    output_dir: str

    @property
    def dataset_failed(self) -> str:
        """Written beside ``data_dir`` by the staging job that gave up on it, naming that job and
        why (:func:`trainium_job.waits.write_failed`): its waiters end at once with the reason.
        Beside, not in it: a staging attempt replaces the directory whole."""
        return staging_failed(self.data_dir)

    @property
    def cache_marker(self) -> str:
        """Written after a successful precompile pass: later runs skip it."""
        return f"{self.cache_dir}/.precompiled"

    @property
    def complete_marker(self) -> str:
        """The trainer's mark of a run that reached its ``--max_steps`` (:data:`COMPLETE_MARKER`)."""
        return f"{self.output_dir}/{COMPLETE_MARKER}"

    @property
    def run_name(self) -> str:
        """The run's name: its output directory's last part."""
        return self.output_dir.rstrip("/").rsplit("/", 1)[-1]

    @property
    def model_dir(self) -> str:
        """The run's exported Hugging Face folder (:data:`MODEL_DIR`)."""
        return f"{self.output_dir}/{MODEL_DIR}"

    @property
    def restart_ledger(self) -> str:
        """The run's restart ledger (:data:`RESTART_LEDGER`)."""
        return f"{self.output_dir}/{RESTART_LEDGER}"


#: The pods' variable holding the model bucket's name: from the ConfigMap below (its key
#: ``MODEL_BUCKET_KEY``), which the workload applies with the bucket the platform made. A value
#: known only at deploy stays out of the job's manifest, whose name hashes its content.
MODEL_BUCKET_ENV = "TRAINIUM_MODEL_BUCKET"
MODEL_BUCKET_CONFIG_MAP = "trainium-model-bucket"
MODEL_BUCKET_KEY = "bucket"


def model_key_prefix(run_name: str) -> str:
    """The key prefix of a run's model in the model bucket: ``<run>/model`` (the folder
    ``/data/runs/<run>/model`` on FSx)."""
    return f"{run_name}/{MODEL_DIR}"


def model_commands(uri: str, folder: str) -> tuple[str, str]:
    """The two commands that fetch a model from ``uri`` (``s3://<bucket>/<run>/model/``) into
    ``folder`` and load it: what the upload, the review and the stack outputs print."""
    return (
        f"aws s3 cp --recursive {uri} {folder}/",
        'python -c "from transformers import BertForPreTraining; '
        f"BertForPreTraining.from_pretrained('{folder}')\"",
    )


def staging_failed(data_dir: str) -> str:
    """The failed marker of the staging job of the shard set at ``data_dir``
    (:attr:`JobPaths.dataset_failed`)."""
    return f"{data_dir}.staging-failed"


def spend_dir(run_name: str) -> str:
    """The spend folder of the job whose first phase's run is ``run_name``."""
    return f"{SPEND_ROOT}/{run_name}"


def job_paths(*, dataset_name: str, cache_set: str, run_name: str) -> JobPaths:
    """The standard layout: ``/data/datasets/<name>``, ``/data/neuron-cache/<set>``, ``/data/runs/<run>``."""
    data_dir = f"{DATA_MOUNT}/datasets/{dataset_name}"
    return JobPaths(
        data_dir=data_dir,
        dataset_marker=f"{data_dir}/.staged",
        cache_dir=f"{DATA_MOUNT}/neuron-cache/{cache_set}",
        output_dir=f"{DATA_MOUNT}/runs/{run_name}",
    )
