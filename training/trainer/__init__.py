"""BERT phase-1 pretraining: ``python -m training.trainer.pretrain`` (see :mod:`.pretrain`).

Importing this package loads nothing heavy: :mod:`.cli` is standard library only, so the CDK app
checks a job's flags with the trainer's own parser without torch.
"""
