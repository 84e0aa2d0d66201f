"""What runs inside the training and tools images, grouped by concern:

* :mod:`training.trainer`: BERT phase-1 pretraining (torchrun-compatible; Trainium through
  PyTorch/XLA, CUDA or CPU), its flags, checkpoints, resume and metrics;
* :mod:`training.dataprep`: the data tool (text corpus -> the HDF5 shards and manifest the
  trainer reads), on one machine or as an Indexed Job;
* :mod:`training.node`: probes of the node before training (Neuron driver, EFA fabric) and the
  Prometheus exporters of the tools image (EFA counters, FSx capacity).

The entry points (``python -m training....``) are listed once, in :mod:`trainium_job.entry_points`.
Facts the CDK app shares with the images (the Neuron stack, ports, metric and counter names, file
names, exit codes) live in :mod:`trainium_job`, standard library only. The CDK app imports from here
only the flag parsers of :mod:`training.trainer.cli` and :mod:`training.dataprep.prep_settings`
(to check a job's arguments at synth); nothing under this package is imported by it otherwise.
"""
