"""The training and tools images' entry points: every ``python -m training....`` a pod, a Job, a
user or the docs run, in one table. Standard library only.

The pods the CDK app renders name their module from here, and a test checks that each is a module
of ``training/`` with a ``main`` run under ``__main__`` and that the docs name no other.
"""

from __future__ import annotations

from typing import Final

#: BERT pretraining, run by torchrun in each worker pod (training image).
PRETRAIN: Final = "training.trainer.pretrain"
#: Neuron's tutorial checkpoint (``ckpt_<step>.pt``) -> a weights-only start for ``--init_from``.
IMPORT_NEURON: Final = "training.trainer.import_neuron"
#: A checkpoint -> a Hugging Face folder (config.json, model.safetensors, tokenizer).
EXPORT: Final = "training.trainer.export"
#: An exported folder -> S3 (``s3://<model bucket>/<run>/model/``), each file with its SHA-256
#: checksum, then read back and compared (training image, the exporting pod).
UPLOAD_MODEL: Final = "training.trainer.upload_model"
#: The data tool: text corpus -> HDF5 shards, on one machine.
PREPARE_DATA: Final = "training.dataprep.prepare_data"
#: The data tool as an Indexed Job across pods (the platform's dataset preparation, training image).
PREPARE_INDEXED: Final = "training.dataprep.prepare_indexed"
#: A phase's held-out set from books the training corpus cannot hold (the platform's held-out
#: staging Job, training image: ``trainium_eks.jobs.heldout_staging``).
HELDOUT: Final = "training.dataprep.heldout"
#: A shard set's manifest: write one for shards made elsewhere, or verify checksums.
SHARD_FORMAT: Final = "training.dataprep.shard_format"
#: A BERT WordPiece vocabulary for the data tool.
VOCAB: Final = "training.dataprep.vocab"
#: The node's Neuron driver against the image's runtime, before training (training image).
DRIVER_CHECK: Final = "training.node.driver_check"
#: The EFA all-reduce check across the gang before training (training image).
FABRIC_CHECK: Final = "training.node.fabric_check"
#: The training job's submitter: waits for the job's data, then creates its Volcano Job (tools
#: image, a batch Job on the system nodes: ``trainium_job.submission``).
SUBMIT: Final = "training.launch.submit"
#: The deep health check of a new Trainium node, before it takes work (training image, a
#: DaemonSet on the nodes not yet checked).
NODE_HEALTH: Final = "training.node.health_check"
#: EFA counters for Prometheus (tools image, a DaemonSet on the Trainium nodes).
EFA_EXPORTER: Final = "training.node.efa_exporter"
#: FSx capacity for Prometheus (tools image, one pod on the system nodes).
FSX_EXPORTER: Final = "training.node.fsx_exporter"

#: Module -> the image it runs in.
ENTRY_POINTS: Final[dict[str, str]] = {
    PRETRAIN: "training",
    IMPORT_NEURON: "training",
    EXPORT: "training",
    UPLOAD_MODEL: "training",
    PREPARE_DATA: "training",
    PREPARE_INDEXED: "training",
    HELDOUT: "training",
    SHARD_FORMAT: "training",
    VOCAB: "training",
    DRIVER_CHECK: "training",
    FABRIC_CHECK: "training",
    NODE_HEALTH: "training",
    SUBMIT: "tools",
    EFA_EXPORTER: "tools",
    FSX_EXPORTER: "tools",
}
