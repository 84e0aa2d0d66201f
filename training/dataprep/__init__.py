"""The data tool: a text corpus (one sentence per line, a blank line between documents) into the
HDF5 shards and manifest the trainer reads (``python -m training.dataprep.prepare_data``, or as an
Indexed Job, :mod:`.prepare_indexed`).

Importing this package loads nothing heavy: :mod:`.prep_settings` and :mod:`.text_input` are
standard library only, so the CDK app checks a preparation's flags with the tool's own parser.
"""
