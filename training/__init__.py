"""BERT phase-1 pretraining on Trainium (XLA), CUDA or CPU.

Entry point: ``python -m training.pretrain`` (torchrun-compatible). The launch helper
``training.launch`` renders the torchrun command line and is importable without torch, so
this package file imports nothing heavy: the CDK app imports ``training.launch`` at synth
time in an environment that need not have torch, h5py or transformers.
"""
