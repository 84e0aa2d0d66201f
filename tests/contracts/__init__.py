"""Consumer contracts: what each program that reads the platform's output accepts, at the version
the platform pins, each name with its citation.

Why here, under ``tests/``: the tables are expectations about other programs, read only by the
tests. They are kept apart from the product code on purpose: nothing in this package imports
``trainium_eks`` or ``trainium_job`` (tested), and the product cannot import ``tests``, so a table
can never become the source of the value it checks; a check of our output against a table
written from our own constants could not fail.

One module per consumer, each with a ``Contract`` (or several) of :class:`~tests.contracts.model.Entry`:
:mod:`.fsx_csi`, :mod:`.libfabric`, :mod:`.neuron`, :mod:`.torch_elastic`, :mod:`.volcano`,
:mod:`.pod_security`, :mod:`.nodes`, :mod:`.resources`, and the Helm values of every chart the
platform installs in :mod:`.charts`. The checks are :mod:`.check`; what the stacks emit (both
stacks, several configurations, and the TorchX pod) is :mod:`.emitted`.

Adding a consumer: write its module (facts with citations, never our constants), then register it
where the checks look it up: an environment-variable prefix in ``check.ENV_CONSUMERS``, a chart
in ``charts.CHART_VALUES`` (a chart the platform installs without a table fails the tests).
"""
