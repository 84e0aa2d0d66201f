"""The two-phase scene: the default deploy's job (phase 1, then phase 2 from phase 1's final
checkpoint, each model exported) on the rehearsal's cluster, from a synthesized template of its
own. Both staging Jobs and both held-out staging Jobs start together, as a deploy applies them;
phase 2's staging waits for phase 1's shards before it downloads its own, each held-out Job for
its phase's shards, and the gang starts once phase 1's shards are there (what the job's submitter
waits for: the main story plays it) and phase 1's held-out set too, while phase 2's stagings still
run. On the cluster the gang does not wait for a held-out set: the trainer evaluates from the
first evaluation step that finds it (tests/training/trainer/test_evaluate.py plays a set that
comes late); the scene waits so that phase 1's evaluations are not a race. The held-out books
come from the web stand-in (``Cluster(web=...)``, at the synthesized PG-19 URL). The gang
trains phase 1 to its end, starts phase 2 from it and is deleted once phase 2 has a checkpoint (a
redeploy, or Volcano's RestartJob); the gang started again must skip phase 1, resume phase 2 from
its own checkpoint and export it.

The model bucket is the stand-in S3 (``Cluster(s3=True)``): pod 0 uploads each phase's export
there; the first gang is deleted only once phase 1's upload is verified, so the redeployed gang's
upload of it finds every file there. What the bucket held then and at the end, and each model
fetched from it, are :class:`ModelBucket`.

The datasets are two tars of small shards made from one corpus, so one vocabulary: phase 1's at
sequence length 128 (the rehearsal's usual tar, at the public tar's URL), phase 2's at
:data:`PHASE2_SEQ_LEN` (the tiny model's positions allow it; the public seq-512 tar's shards
would cost the CPU four times phase 1's attention for nothing the scene checks).
"""

from __future__ import annotations

import json
import subprocess
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from tests.rehearsal.cluster import Cluster
from tests.rehearsal.manifests import PodSpec, Workload
from tests.rehearsal.s3_standin import BUCKET, S3StandIn
from tests.rehearsal.scenario import (
    DATASET,
    Observations,
    Rehearsal,
    default_ami_tag,
    driver_version,
    image_packages,
    variant_context,
)
from tests.support import REPO
from training.dataprep.synthetic import (
    SMALL_SET_FLAGS,
    SyntheticShards,
    gutenberg_books,
    make_shards,
    pg19_parquet,
    prepare_data_command,
    write_corpus,
)
from training.trainer import checkpoint as ckpt
from trainium_eks.jobs.dataset_staging import PUBLIC_BERT_SHARDS
from trainium_eks.jobs.heldout_staging import PG19_TEST_PARQUET, heldout_paths
from trainium_job.paths import JobPaths, job_paths, model_key_prefix

#: Where the scene's phase-2 tar and vocabulary are "in S3" (the s3 stand-in serves them).
PHASE2_SOURCE = "s3://rehearsal-datasets/shards-seq256.tar"
VOCAB_SOURCE = "s3://rehearsal-datasets/vocab.txt"
PHASE1_STEPS, PHASE1_EVERY = 6, 3
#: Long enough that the deletion after phase 2's first checkpoint lands well before its end.
PHASE2_STEPS, PHASE2_EVERY = 15, 3
PHASE2_SEQ_LEN, PHASE2_PRED = 256, 40
CACHE1, CACHE2 = "rehearsal-cache-seq128", "rehearsal-cache-seq256"
RUN1, RUN2 = "rehearsal-two-phases", "rehearsal-two-phases-phase2"
N_DOCS = 40
#: The held-out books: a corpus of another seed than the shards' (``make_shards`` writes seed 0's).
HELDOUT_BOOKS, HELDOUT_SEED = 20, 1
#: Samples each held-out evaluation reads (``--eval_samples``; the trainer's default is MLPerf's
#: 10,000): two whole global batches of the scene's 8.
EVAL_SAMPLES = 16
#: Seconds the scene may take end to end before it gives up (it takes ~3 min on 2 busy cores).
SCENE_TIMEOUT_S = 480

#: The scene's phases, in the order :meth:`TwoPhases.play` plays them.
TWO_PHASES: Final = ("start", "phase2_checkpointed", "redeploy")


@dataclass(frozen=True)
class Sources:
    """The scene's "S3": phase 1's tar, phase 2's tar, the vocabulary both were made with; and its
    "web": the held-out books, a Parquet file of PG-19's columns."""

    phase1: Path
    phase2: Path
    vocab: Path
    vocab_size: int
    heldout: Path


def sources(root: Path, env: dict[str, str]) -> Sources:
    """Both tars, laid out as the public tars are: phase 1's from a synthetic corpus, phase 2's
    from the same corpus and ``vocab.txt`` (one vocabulary for both phases, as a user makes them);
    the held-out books from a corpus of another seed, as PG-19 keeps a book."""
    flags = {**SMALL_SET_FLAGS, "num_shards": 4}
    phase1 = make_shards(root / "phase1", n_docs=N_DOCS, flags=flags, env=env, timeout=180)
    phase2 = SyntheticShards(root / "phase2", phase1.vocab)
    command = prepare_data_command(
        input=root / "phase1" / "corpus.txt",
        vocab=phase1.vocab,
        output_dir=phase2.dir,
        **{**flags, "max_seq_len": PHASE2_SEQ_LEN, "max_pred_len": PHASE2_PRED},
    )
    done = subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=180, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}: {done.stderr[-2000:]}")
    tars = []
    for shards, name in ((phase1, Path(PUBLIC_BERT_SHARDS).name), (phase2, Path(PHASE2_SOURCE).name)):
        tar = root / name
        with tarfile.open(tar, "w") as archive:
            for path in shards.files:
                archive.add(path, arcname=f"{tar.stem}/{path.name}")
        tars.append(tar)
    corpus = write_corpus(root / "heldout" / "corpus.txt", n_docs=HELDOUT_BOOKS, seed=HELDOUT_SEED)
    books = [(f"Book {i} by Someone", text) for i, text in enumerate(gutenberg_books(corpus))]
    heldout = pg19_parquet(root / "heldout" / Path(PG19_TEST_PARQUET).name, books)
    return Sources(tars[0], tars[1], phase1.vocab, phase1.vocab_size, heldout)


def two_phase_context(vocab_size: int) -> dict[str, str]:
    """The rehearsal's small variant (tiny BERT, 2 nodes x 2 workers) with both phases, as the
    default deploy has them, but short: phase 2 at :data:`PHASE2_SEQ_LEN` from phase 1's final
    checkpoint, each exported with the staged vocabulary; each phase's held-out set (on by
    default) made with :data:`EVAL_SAMPLES` samples, which each evaluation reads."""
    context = variant_context(vocab_size)
    context.update(
        {
            "training_phases": "both",
            "vocab_source": VOCAB_SOURCE,
            "training_max_steps": str(PHASE1_STEPS),
            "training_checkpoint_every": str(PHASE1_EVERY),
            "training_cache_set": CACHE1,
            "training_run_name": RUN1,
            "phase2_dataset_source": PHASE2_SOURCE,
            "training_script_args": json.dumps(
                {**json.loads(context["training_script_args"]), "eval_samples": str(EVAL_SAMPLES)}
            ),
            "phase2_batch_size": context["training_batch_size"],
            "phase2_global_batch": context["training_global_batch"],
            "phase2_max_steps": str(PHASE2_STEPS),
            "phase2_checkpoint_every": str(PHASE2_EVERY),
            "phase2_cache_set": CACHE2,
            "phase2_run_name": RUN2,
            "phase2_script_args": json.dumps(
                {
                    "vocab_size": str(vocab_size),
                    "warmup_steps": "2",
                    "seq_len": str(PHASE2_SEQ_LEN),
                    "max_pred_len": str(PHASE2_PRED),
                    "eval_samples": str(EVAL_SAMPLES),
                }
            ),
        }
    )
    return context


@dataclass
class ModelBucket:
    """The stand-in S3's model bucket (``S3StandIn.objects``: key -> size, checksum, metadata,
    versions): once the first gang was deleted, and at the end; each run's model fetched from it
    at the end, as the printed ``aws s3 cp --recursive`` would (run name -> folder)."""

    before_redeploy: dict[str, dict[str, Any]] = field(default_factory=dict)
    after: dict[str, dict[str, Any]] = field(default_factory=dict)
    fetched: dict[str, Path] = field(default_factory=dict)


def uploaded(log: str, run: str) -> bool:
    """Whether ``log`` (an exporting pod's) holds the upload's line that ``run``'s model is in the
    bucket, verified (training.trainer.upload_model ``summary``)."""
    return bool(upload_summaries(log, run))


def upload_summaries(log: str, run: str) -> list[str]:
    """The upload's last lines in ``log`` for ``run``'s model: ``s3://<bucket>/<run>/model/: N files
    verified (SHA-256 and size): ...``, one per upload that ended well."""
    start = f"s3://{BUCKET}/{model_key_prefix(run)}/: "
    return [line for line in log.splitlines() if line.startswith(start) and "files verified" in line]


@dataclass
class TwoPhaseObservations(Observations):
    """What the scene saw; :attr:`paths` are phase 1's, :attr:`paths2` phase 2's
    (``newest_after_stop``: phase 2's newest complete checkpoint once the first gang was gone)."""

    paths2: JobPaths = field(default_factory=lambda: job_paths(dataset_name="", cache_set="", run_name=""))
    staging_codes: list[int] = field(default_factory=list)
    staging_logs: list[str] = field(default_factory=list)
    heldout_codes: list[int] = field(default_factory=list)
    heldout_logs: list[str] = field(default_factory=list)
    #: What the web stand-in was asked (url, status) while the held-out sets were made.
    web_requests: list[dict[str, Any]] = field(default_factory=list)
    #: time.time() when phase 1's marker was written, the gang started, phase 2's marker was written.
    phase1_staged: float = 0.0
    gang_started: float = 0.0
    phase2_staged: float = 0.0
    #: Host name -> exit code of the first gang, deleted after phase 2's first checkpoint.
    stopped_codes: dict[str, int] = field(default_factory=dict)
    redeploy_time: float = 0.0  # time.time() at the second gang's start
    redeploy_codes: dict[str, int] = field(default_factory=dict)
    #: Whether phase 1's export was there when the first gang was deleted.
    phase1_exported_before_stop: bool = False
    bucket: ModelBucket = field(default_factory=ModelBucket)


class TwoPhases(Rehearsal):
    """Plays :data:`TWO_PHASES` with the helpers of the rehearsal's story."""

    def __init__(
        self,
        cluster: Cluster,
        workload: Workload,
        staging: tuple[PodSpec, ...],
        heldout: tuple[PodSpec, ...],
    ) -> None:
        seen = TwoPhaseObservations(
            paths=job_paths(dataset_name=DATASET, cache_set=CACHE1, run_name=RUN1),
            paths2=job_paths(dataset_name=f"{DATASET}-phase2", cache_set=CACHE2, run_name=RUN2),
            fsx=cluster.fsx,
            claim_path=workload.worker.claim_path(),
            phases=TWO_PHASES,
        )
        super().__init__(cluster, workload, seen)
        self.two = seen
        self.staging = staging
        self.heldout = heldout

    def start(self) -> None:
        """Both staging Jobs and both held-out Jobs start, as a deploy applies them together; the
        gang starts once phase 1's shards are there, as its submitter creates it then, and (the
        scene's choice: see the module docstring) phase 1's held-out set."""
        pods = [
            self.cluster.start_staging(spec, f"stage-dataset-{n}") for n, spec in enumerate(self.staging, 1)
        ]
        held = [self.cluster.start_staging(spec, f"heldout-{n}") for n, spec in enumerate(self.heldout, 1)]
        marker1 = self.two.local(self.two.paths.dataset_marker)
        self._until(marker1.exists, "phase 1's shards are staged", pods=pods[:1])
        self.two.phase1_staged = marker1.stat().st_mtime
        heldout1 = self.two.local(heldout_paths(self.two.paths).dataset_marker)
        self._until(heldout1.exists, "phase 1's held-out set is made", pods=held[:1])
        self.two.gang_started = time.time()
        self.gang = [self.cluster.start_worker(i) for i in range(self.workload.replicas)]
        codes = self._wait_all([*pods, *held], "both datasets' staging and their held-out sets")
        self.two.staging_codes = [codes[p.hostname] for p in pods]
        self.two.staging_logs = [p.output() for p in pods]
        self.two.heldout_codes = [codes[p.hostname] for p in held]
        self.two.heldout_logs = [p.output() for p in held]
        assert self.cluster.web is not None
        self.two.web_requests = self.cluster.web.requests()
        self.two.phase2_staged = self.two.local(self.two.paths2.dataset_marker).stat().st_mtime

    def phase2_checkpointed(self) -> None:
        """Phase 1 to its end, phase 2 to its first checkpoint; then every gang pod is deleted."""
        complete1 = self.two.local(self.two.paths.complete_marker)
        self._until(complete1.exists, "phase 1 reaches its --max_steps")
        root2 = ckpt.checkpoint_root(self.two.local(self.two.paths2.output_dir))
        self._until(lambda: ckpt.newest_complete(root2) is not None, "phase 2 writes a checkpoint")
        model1 = self.two.local(self.two.paths.model_dir) / "config.json"
        self.two.phase1_exported_before_stop = model1.exists()
        self._until(self._phase1_uploaded, "pod 0 uploads phase 1's model")
        grace = self.workload.worker.grace_period_s
        for pod in self.gang:
            self.two.stopped_codes[pod.hostname] = self.cluster.stop(pod, grace)
        self.two.newest_after_stop = ckpt.newest_complete(root2)
        self.two.gang_logs.append({p.hostname: p.output() for p in self.gang})
        self.two.bucket.before_redeploy = self._bucket().objects()

    def redeploy(self) -> None:
        """The same gang again (a redeploy, or RestartJob's second half), run to its end."""
        self.two.redeploy_time = time.time()
        self.gang = [self.cluster.start_worker(i) for i in range(self.workload.replicas)]
        try:
            self.two.redeploy_codes = self._wait_all(self.gang, "the redeployed gang")
        finally:
            self.two.gang_logs.append({p.hostname: p.output() for p in self.gang})
        self.two.bucket.after = self._bucket().objects()
        for run in (RUN1, RUN2):
            into = self.cluster.root / "fetched" / f"{run}-model"
            self.two.bucket.fetched[run] = self._bucket().download(model_key_prefix(run), into)

    def _phase1_uploaded(self) -> bool:
        """Whether pod 0 has uploaded phase 1's model; the scene fails at once when it said it did
        not, or uploaded it elsewhere."""
        log = self.gang[0].output()
        if uploaded(log, RUN1):
            return True
        said = [
            line
            for line in log.splitlines()
            if line.startswith(("phase 1: the model stays on FSx", "phase 1: the upload to"))
            or " files verified (SHA-256 and size)" in line
        ]
        if said:
            raise self._failed(f"pod 0 did not upload phase 1's model to the bucket: {said}")
        return False

    def _bucket(self) -> S3StandIn:
        assert self.cluster.s3 is not None, "the scene's cluster has no stand-in S3"
        return self.cluster.s3


def play(
    root: Path,
    workload: Workload,
    staging: tuple[PodSpec, ...],
    heldout: tuple[PodSpec, ...],
    made: Sources,
) -> TwoPhaseObservations:
    """The scene on a fresh cluster under ``root``; every pod is gone when it returns."""
    cluster = Cluster(
        root,
        workload,
        s3_objects={PUBLIC_BERT_SHARDS: made.phase1, PHASE2_SOURCE: made.phase2, VOCAB_SOURCE: made.vocab},
        dpkg_versions=image_packages(),
        driver_version=driver_version(default_ami_tag()),
        s3=True,
        web={PG19_TEST_PARQUET: made.heldout},
    )
    try:
        scene = TwoPhases(cluster, workload, staging, heldout)
        scene.play()
        return scene.two
    finally:
        cluster.close()
