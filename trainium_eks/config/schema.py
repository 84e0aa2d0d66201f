"""The platform's configuration: the one typed object, its fields and their defaults.

Defaults are written here, each with what it means in the string right after the field (the
attribute docstring IDEs show; ``help()`` lists them too: :mod:`.field_docs`); ``cdk.json``
context and ``cdk synth -c key=value`` override them (:mod:`.context`); every field is checked
when the object is built (:mod:`.checks`), so an invalid configuration never exists.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from trainium_job.errors import register_fields
from trainium_job.instances import InstanceFacts, instance_facts
from trainium_job.naming import DEFAULT_NAME_PREFIX
from trainium_job.paths import DATA_MOUNT
from trainium_job.phases import TrainingPhases
from trainium_job.plan import TrainingPlan, plan_training
from trainium_job.spec import BertJobSpec, phase2_spec

from ..jobs.dataset_staging import (
    PUBLIC_BERT_SHARDS,
    PUBLIC_BERT_SHARDS_512,
    PUBLIC_BERT_VOCAB,
    start_path,
    vocab_file,
)
from ..jobs.heldout_staging import heldout_dir
from ..monitoring.options import MonitoringOptions
from ..versions import DEFAULT_KUBERNETES_VERSION, default_neuron_ami_release
from .field_docs import with_field_docs

#: ``training_phases`` values: phase 1 and then phase 2, or one of them.
PHASE_CHOICES = ("both", "1", "2")
#: The context keys of phase 2's job: ``phase2_<field>`` sets that field of :attr:`PlatformSettings.phase2`
#: (the other fields, the launcher's and the model's, are phase 1's).
PHASE2_PREFIX = "phase2_"
PHASE2_FIELDS = (
    "batch_size",
    "global_batch",
    "max_steps",
    "checkpoint_every",
    "dataset_name",
    "cache_set",
    "run_name",
    "script_args",
    "eval_every",
)
register_fields(PHASE2_PREFIX, "PlatformConfig.phase2", PHASE2_FIELDS)
#: The monitoring add-on's own defaults, which the ``monitoring_*`` keys take.
_MONITORING = MonitoringOptions()


@dataclass(frozen=True)
class PlatformSettings:
    """Everything a deployment of the platform can vary. Each default is the value documented here.

    Unchecked: build :class:`~trainium_eks.config.PlatformConfig` (the same fields, checked when
    built) rather than this.
    """

    region: str = "us-west-2"
    """AWS region of the stack (China regions are refused: they lack EKS Pod Identity)."""
    trainium_az_id: str = "usw2-az4"
    """AZ **ID** (not name: names differ per account) that offers the instance type; the Trainium
    nodegroup, its placement group and FSx live only here.
    """
    second_az_id: str = "usw2-az3"
    """Second AZ ID: the EKS control plane needs subnets in two AZs."""
    instance_type: str = "trn1.32xlarge"
    """Trainium instance type (a row of ``INSTANCE_FACTS``)."""
    min_nodes: int = 2
    """Trainium nodegroup sizes."""
    desired_nodes: int = 2
    max_nodes: int = 2
    kubernetes_version: str = DEFAULT_KUBERNETES_VERSION
    """Kubernetes minor version, each pinned with its kubectl layer (a key of ``KUBERNETES_RELEASES``).
    Default: the newest on which every pinned component is declared compatible
    (``trainium_eks.compatibility``); on another, synth prints a warning per component that is not.
    """
    trainium_ami_release_version: str | None = None
    """EKS Neuron AMI release of the Trainium nodes (their nodegroup's ``releaseVersion``, e.g.
    "1.36.2-20260625", of ``kubernetes_version``). It fixes the nodes' Neuron driver, which must
    run the training image's Neuron runtime: a known release with another driver is refused.
    Unset: the newest known release whose driver does (``NEURON_AMI_RELEASES`` in
    trainium_eks/versions.py; 1.36.2-20260625 for 1.36).
    """
    endpoint_public_cidrs: tuple[str, ...] = ()
    """CIDRs allowed to reach the public API endpoint. Empty: private endpoint only (the default;
    add your workstation's /32 to use kubectl from outside the VPC). IPv4 only; together at
    most one /8 of addresses unless ``endpoint_public_allow_broad``.
    """
    endpoint_public_allow_broad: bool = False
    """Opt-in for ``endpoint_public_cidrs`` that together cover more than one /8 of IPv4
    (:data:`MAX_PUBLIC_ENDPOINT_ADDRESSES`). False: such sets are refused. ``0.0.0.0/0`` is
    refused either way.
    """
    admin_principal_arns: tuple[str, ...] = ()
    """IAM role/user ARNs given cluster-admin access entries."""
    root_volume_gib: int = 512
    """Encrypted gp3 root volume of each Trainium node (GiB); container images are ~10 GiB each."""
    capacity_reservation_id: str | None = None
    """Capacity reservation or Capacity Block to launch into (``cr-`` + 17 hex), if any."""
    capacity_type: str = "on-demand"
    """``on-demand`` reservation or ``capacity-block`` (ML Capacity Block) for the id above."""
    trainium_capacity: str = "karpenter"
    """How the Trainium nodes exist. ``karpenter`` (the default): Karpenter launches them when a
    training pod waits and removes them ``trainium_idle_minutes`` after the last one ends; none
    run (or bill) between jobs (docs/capacity.md). It is the default because the fixed
    nodegroup bills its nodes while no job runs: 2 x trn1.32xlarge, $43.72/h idle (~$31,915 a
    month) against $0.61/h with Karpenter (the review's ``idle:`` line). ``nodegroup``: a managed
    nodegroup of ``desired_nodes``, up from deploy to destroy (what the platform did before;
    ``-c trainium_capacity=nodegroup``).
    """
    trainium_gang_wait_minutes: int = 30
    """With ``karpenter``: minutes a job's gang may wait for all of its nodes; then the job is
    aborted, the nodes that came are released, and it waits at no cost until resumed
    (``vcctl job resume``). At least what a new node takes before its pod runs: its launch and
    join, the image pull and the node health check (the review's ``gang wait`` line shows the
    sum, ``trainium_eks/nodes/gang_wait.py``); a shorter wait is refused.
    """
    trainium_idle_minutes: int = 10
    """With ``karpenter``: minutes an empty Trainium node is kept (a relaunch within them reuses it;
    each costs a node-minute at the on-demand price). At least 1 (at 0 a restarting gang would
    lose its nodes); above what a relaunch takes the review warns; with ``karpenter``,
    ``max_nodes`` is bounded by the Trainium subnet's addresses (docs/capacity.md, Bounds).
    """
    trainium_health_check: bool = True
    """Deep health check of every new Trainium node before it takes work (Neuron devices, EFA,
    a compute and a collective test; trainium_eks/nodes/health_checks.py): nodes start tainted
    ``trainium-eks/node-health=pending`` and a DaemonSet of the training image lifts the taint
    or names the failed check. On by default: a bad node found at start costs minutes, one
    found by a failing job costs the job. The check runs the training image, so it comes with
    the training stack: with ``training_enabled=false`` new nodes wait, tainted, until one is
    deployed (set this false for a platform used without it). Off: no taint, no DaemonSet.
    """
    trainium_health_replace: bool = True
    """With the check on: terminate a node that fails it, so the nodegroup (or Karpenter) brings a
    fresh one. On by default (a failed node is never used again). Off: the node keeps the
    failed taint for inspection, and no AWS role is created.
    """
    efa_interface_layout: str = "efa"
    """EFA interface layout: ``efa`` on every card (what the reference walkthrough ran), or
    ``efa-only`` (ENA primary + EFA-only interfaces, AWS's layout that saves subnet IPs).
    """
    fast_image_pull: bool = True
    """nodeadm's parallel image pull on the Trainium nodes (containerd's SOCI snapshotter in parallel
    pull mode, installed on the EKS AL2023 AMIs; experimental in nodeadm's docs): the training
    image's layers are fetched in parallel chunks at every job start.
    """
    name_prefix: str = DEFAULT_NAME_PREFIX
    """Prefix of every named resource and of the stack names (lower case, <= 20 characters); each
    name built from it (stack, ECR repository, job) must be valid.
    """
    vpc_cidr: str = "10.0.0.0/16"
    """IPv4 CIDR of the VPC the platform creates (a /16)."""
    nat_gateways: int = 1
    """NAT gateways of the created VPC (1 keeps cost down; 2 survives an AZ outage)."""
    existing_vpc_id: str | None = None
    """Use an existing VPC instead of creating one: its id, plus private subnet ids with the
    Trainium-AZ subnet first and the second-AZ subnet next.
    """
    existing_private_subnet_ids: tuple[str, ...] = ()
    system_nodes: int = 2
    """Size of the system nodegroup that runs controllers."""
    fsx_deployment_type: str = "PERSISTENT_2"
    """FSx for Lustre deployment type: PERSISTENT_2 (replicated in its AZ, survives server
    failures) or SCRATCH_2 (not replicated, for short experiments). Changing it REPLACES the
    file system (the old one is retained, not deleted).
    """
    fsx_storage_gib: int = 1200
    """FSx capacity in GiB: 1200 or a multiple of 2400 (can grow later, never shrink)."""
    fsx_throughput_per_tib: int | None = None
    """PERSISTENT_2 throughput tier, MB/s per TiB (125/250/500/1000). Unset: 125, the cheapest,
    which is enough for BERT (~1 KB read per sequence, a ~4 GB checkpoint now and then:
    150 MB/s at 1.2 TiB). Must stay unset for SCRATCH_2 (fixed throughput).
    """
    fsx_compression: bool = True
    """LZ4 compression on FSx (less capacity and throughput used by compressible files)."""
    fsx_s3_import_uri: str | None = None
    """S3 bucket/prefix imported at /dataset on FSx (e.g. the tokenized HDF5 shards), if any.
    A file system linked to S3 gets no FSx backups.
    """
    fsx_s3_export_uri: str | None = None
    """S3 bucket/prefix that /runs on FSx (checkpoints, TensorBoard logs) is exported to, if any:
    files as they are created, changed or deleted from then on; files already there by one
    export task (the FsxExportCommand stack output). A file system linked to S3 gets no FSx backups.
    """
    ecr_keep_images: int = 20
    """Images the ECR repository keeps (newest first; untagged ones expire after 7 days)."""
    neuron_scheduler_extension: bool = False
    """Neuron scheduler extension (contiguous NeuronCore allocation for pods that share a node).
    Off: training pods take whole nodes through Volcano, which the extension does not serve,
    and its bundled kube-scheduler (1.31) is far outside the skew policy of a 1.35 or 1.36 cluster.
    """
    neuron_node_problem_detector: bool = False
    """Neuron node-problem-detector (privileged, monitor-only). Off: the EKS node monitoring
    agent already reports Neuron device errors and drives the nodegroups' auto-repair.
    """
    etcd_enabled: bool = True
    """etcd server (v2 API) for the ``etcd`` rendezvous of torchrun, with a gp3 volume (and the
    EBS CSI driver it needs). On: the platform offers the reference's rendezvous out of the
    box; set false when every job uses c10d (the training default).
    """
    container_insights: bool = False
    """CloudWatch Container Insights with Neuron and EFA metrics (amazon-cloudwatch-observability
    add-on). Off: it bills per metric and log GB; turn on for production fleets.
    """
    monitoring_enabled: bool = True
    """Prometheus and Grafana (kube-prometheus-stack on the system nodes), neuron-monitor, the EFA
    and FSx exporters, the training dashboard and the alerts (docs/monitoring.md). No public
    endpoint: ``kubectl port-forward``. Prometheus's volume brings the EBS CSI driver.
    """
    monitoring_grafana: bool = _MONITORING.grafana
    """Grafana with the training dashboard (admin password generated into a Secret)."""
    monitoring_alertmanager: bool = _MONITORING.alertmanager
    """Alertmanager. Off: no receiver is configured, so it would deliver nothing; Prometheus
    evaluates the alerts either way (its Alerts page, Grafana).
    """
    monitoring_neuron_monitor: bool = _MONITORING.neuron_monitor
    """neuron-monitor on the Trainium nodes (NeuronCore utilization, device memory, errors)."""
    monitoring_exporters: bool = True
    """The training workload's EFA and FSx exporters (its tools image)."""
    monitoring_volume_gib: int = _MONITORING.volume_gib
    """Prometheus's gp3 volume in GiB (10-16384); retention by size keeps at most 80% of it."""
    monitoring_retention_days: int = _MONITORING.retention_days
    """Days of metrics Prometheus keeps (less once 80% of the volume is used)."""
    monitoring_amp_remote_write: bool = _MONITORING.amp_remote_write
    """Also remote-write every sample to an Amazon Managed Service for Prometheus workspace
    (created; Prometheus writes with an EKS Pod Identity role).
    """
    monitoring_stall_minutes: int = _MONITORING.stall_minutes
    """Minutes without an optimizer step before the TrainingStalled alert fires."""
    monitoring_fsx_free_percent: int = _MONITORING.fsx_free_percent
    """Percent of FSx free below which the CloudWatch alarm (AWS/FSx FreeDataStorageCapacity) and
    the FsxFreeCapacityLow alert fire (1-99).
    """
    training_enabled: bool = True
    """Deploy the BERT pretraining job (image, dataset staging, Volcano Job, TensorBoard)."""
    training: BertJobSpec = field(default_factory=BertJobSpec)
    """The job: model, batch, schedule, launcher, names (context keys ``training_<field>``,
    e.g. ``training_global_batch``; defaults and checks in :class:`BertJobSpec`).
    """
    training_dataset_source: str = PUBLIC_BERT_SHARDS
    """Where the shards come from: s3://...tar, s3://prefix/ or fsx:/path (see dataset_staging)."""
    training_budget_usd: int | None = None
    """The job's spend ceiling in USD: its pods count the node-hours of every attempt at the list
    price, and at the ceiling the job stops as at a SIGTERM (a checkpoint), exports the model of
    the phase in flight and ends, releasing its nodes; raise it and redeploy to resume from that
    checkpoint. Unset: the estimate at the slower published rate for all phases, times 1.5,
    rounded up to $100 (the review's ``budget:`` line; none without a published rate). At least
    one precompile's cost on the job's nodes.
    """
    training_data_deadline_minutes: int | None = None
    """Minutes the job waits for its first phase's shards (and an imported start) to be staged
    before it gives up without asking for a Trainium node. Unset: twice the staging estimate
    (the review's ``staging:`` line; four hours for a source of unknown size).
    """
    training_phases: str = "both"
    """The pretraining phases the job runs, in order, in the same pods (:data:`PHASE_CHOICES`):
    "both" (phase 1 at sequence length 128, then phase 2 at 512 from phase 1's final
    checkpoint: the reference recipe), "1" (phase 1 only) or "2" (phase 2 only, from
    ``phase2_init_from``). A finished phase is never run again: a redeploy after phase 1 goes
    on with phase 2.
    """
    phase2: BertJobSpec | None = None
    """Phase 2's job (context keys ``phase2_<field>`` for :data:`PHASE2_FIELDS`; the launcher and
    the model are phase 1's). None: the reference phase 2 of ``training``
    (:func:`trainium_job.spec.phase2_spec`: 512 tokens, 80 predictions, lr 2.8e-4, 781
    warm-up steps, 1,563 steps of global batch 32,768, its own cache set and run directory).
    """
    phase2_dataset_source: str = PUBLIC_BERT_SHARDS_512
    """Where phase 2's shards come from (as ``training_dataset_source``): by default the public
    seq-512 set of the same corpus and vocabulary.
    """
    phase2_init_from: str = ""
    """Phase 2's start weights with ``training_phases=2``: a Neuron tutorial checkpoint
    ``s3://.../ckpt_<step>.pt`` (the staging job downloads and imports it, e.g. Neuron's
    published phase 1, :data:`~trainium_eks.jobs.dataset_staging.NEURON_PHASE1_CHECKPOINT`), or
    ``fsx:/<path>`` of a checkpoint directory or a run directory on FSx (``fsx:/runs/<run>``).
    Empty with ``training_phases=both``, whose phase 2 starts from phase 1.
    """
    vocab_source: str = PUBLIC_BERT_VOCAB
    """The WordPiece ``vocab.txt`` the shards were made with: the Hugging Face export at the end
    of each phase writes it beside the model (``/data/runs/<run>/model``). An ``https://``
    URL pinned to a revision, ``s3://bucket/key`` or ``fsx:/<path>``; the staging job copies
    it beside each shard set. Default: Google's uncased vocabulary, which the public shards
    were made with (:data:`~trainium_eks.jobs.dataset_staging.PUBLIC_BERT_VOCAB`). With
    ``preparation_enabled`` the vocabulary is ``preparation_vocab``. Empty: no export.
    """
    heldout_enabled: bool = True
    """A held-out set for each phase, evaluated every ``training_eval_every`` (``phase2_eval_every``)
    steps and after the phase's last (the trainer's 10,000 samples, MLPerf's count): a Job on the
    dataset node makes it once the phase's shards are staged, with their vocabulary, casing and
    sample shape, from books the public shards' Wikipedia cannot hold (PG-19's test split, pinned;
    the Encyclopaedia Britannica left out), into ``/data/datasets/<dataset_name>-heldout``
    (trainium_eks.jobs.heldout_staging). The pods never wait for it: a phase evaluates from the
    first evaluation step that finds it. Needs the shards' vocabulary (``vocab_source``, or
    ``preparation_vocab``): without one, none. Off: no held-out set, no evaluation.
    """
    preparation_enabled: bool = False
    """Prepare the dataset from your own text corpus on FSx with an Indexed Job
    (trainium_eks.jobs.dataset_preparation) instead of staging training_dataset_source.
    """
    preparation_corpus: str = "fsx:/dataset/corpus"
    """The corpus (a file or folder of text, one sentence per line) and the vocab.txt, on FSx:
    under /dataset when fsx_s3_import_uri imports them from S3.
    """
    preparation_vocab: str = "fsx:/dataset/vocab.txt"
    preparation_pods: int = 4
    """Pods of the Indexed Job and CPUs of each (= its worker processes). All run at once: with
    trainium_capacity=karpenter on CPU nodes it launches for them, which must hold them
    (``PREPARATION_NODES``: m7i up to 48 vCPUs, 192 vCPUs in all); with the nodegroup spread over
    its ``desired_nodes`` Trainium nodes.
    """
    preparation_cpus_per_pod: int = 16
    preparation_args: Mapping[str, str] = field(default_factory=dict)
    """More training.dataprep.prepare_data settings, e.g. {"dupe_factor": "5", "seed": "12345"}."""
    tags: Mapping[str, str] = field(default_factory=lambda: {"project": "trainium-bert"})
    """Tags applied to every taggable resource: keys 1-128 and values 0-256 characters of letters,
    digits, spaces and ``_ . : / = + - @``; no ``aws:`` prefix.
    """

    @property
    def facts(self) -> InstanceFacts:
        """The facts-table row of :attr:`instance_type`."""
        return instance_facts(self.instance_type)

    @property
    def gang_wait_minutes(self) -> int | None:
        """:attr:`trainium_gang_wait_minutes` when Karpenter launches the nodes per job, else None."""
        return self.trainium_gang_wait_minutes if self.trainium_capacity == "karpenter" else None

    @property
    def node_health_replacement(self) -> bool:
        """The node health check is on and terminates a node that fails it. Neither reads
        :attr:`training_enabled`, which changes the training stack only."""
        return self.trainium_health_check and self.trainium_health_replace

    @property
    def ami_release_version(self) -> str:
        """:attr:`trainium_ami_release_version`, or its default for :attr:`kubernetes_version`."""
        return self.trainium_ami_release_version or default_neuron_ami_release(self.kubernetes_version)

    @property
    def monitoring(self) -> MonitoringOptions:
        """The ``monitoring_*`` fields as the monitoring add-on's options."""
        return MonitoringOptions(
            volume_gib=self.monitoring_volume_gib,
            retention_days=self.monitoring_retention_days,
            grafana=self.monitoring_grafana,
            alertmanager=self.monitoring_alertmanager,
            neuron_monitor=self.monitoring_neuron_monitor,
            amp_remote_write=self.monitoring_amp_remote_write,
            fsx_free_percent=self.monitoring_fsx_free_percent,
            stall_minutes=self.monitoring_stall_minutes,
        )

    @property
    def training_plan(self) -> TrainingPlan:
        """Workers and accumulation of the job on the Trainium nodegroup."""
        return plan_training(
            self.training, facts=self.facts, nodes=self.desired_nodes, max_nodes=self.max_nodes
        )

    @property
    def phase2_job(self) -> BertJobSpec:
        """Phase 2 as it runs: :attr:`phase2` (or the reference phase 2 of :attr:`training`),
        starting from phase 1's run directory or, with ``training_phases=2``, from
        :attr:`phase2_init_from` where the staging job puts it."""
        spec = self.phase2 if self.phase2 is not None else phase2_spec(self.training)
        if self.training_phases == "2" and self.phase2_init_from:
            spec = spec.replace(init_from=start_path(self.phase2_init_from))
        return self._with_phase_files(spec)

    @property
    def phase_jobs(self) -> tuple[BertJobSpec, ...]:
        """The jobs of :attr:`training_phases`, in the order they run."""
        phase1 = self._with_phase_files(self.training)
        return {"1": (phase1,), "2": (self.phase2_job,)}.get(self.training_phases, (phase1, self.phase2_job))

    @property
    def phases(self) -> TrainingPhases:
        """:attr:`phase_jobs` as the one job that runs them."""
        return TrainingPhases(self.phase_jobs)

    def phase_plan(self, spec: BertJobSpec) -> TrainingPlan:
        """Workers and accumulation of phase ``spec`` on the Trainium nodes."""
        return plan_training(spec, facts=self.facts, nodes=self.desired_nodes, max_nodes=self.max_nodes)

    def _with_phase_files(self, spec: BertJobSpec) -> BertJobSpec:
        """Phase ``spec`` with the files the workload gives it: its vocabulary and, with
        :attr:`heldout_enabled` and a vocabulary to make it with, its held-out set."""
        vocab = self._vocab_path(spec)
        held_out = heldout_dir(spec.paths) if self.heldout_enabled and vocab is not None else None
        return spec.replace(vocab=vocab, eval_dir=held_out)

    def _vocab_path(self, spec: BertJobSpec) -> str | None:
        """The vocabulary the export of phase ``spec`` reads: ``preparation_vocab`` with
        ``preparation_enabled`` (every phase's shards are made with it), else the copy the
        staging job puts beside the shards; None without ``vocab_source`` (no export)."""
        if self.preparation_enabled:
            return DATA_MOUNT + self.preparation_vocab.removeprefix("fsx:")
        return vocab_file(spec.paths) if self.vocab_source else None


# help(PlatformSettings) lists the fields with the docstrings declared beside them (IDEs read those).
PlatformSettings.__doc__ = with_field_docs(PlatformSettings)
