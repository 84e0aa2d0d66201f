"""How long Helm may wait for a chart: shorter than the function that runs it.

The kubectl provider of aws-cdk-lib 2.275.0 (aws-eks-v2 ``kubectl-provider``) runs ``helm upgrade
--install [--wait] --timeout`` inside one invocation of its handler function (15-minute limit, no
``isComplete`` step; the provider framework's function that calls it has 15 minutes too), with no
timeout of its own on the helm process. A Helm wait as long as the function is killed with it and
leaves the release ``pending-install``; the next deploy then fails with "another operation is in
progress" (aws/aws-cdk issue 22257). Helm applies ``--timeout`` to each stage of an install
(pre-install hooks, the wait for resources, post-install hooks: helm v4.1.3
``pkg/action/install.go``, the Helm of the kubectl-v35 layer), so the margin covers the cold start,
``update-kubeconfig``, the chart pull and the short hook Jobs some charts run.
``tests/contracts/test_helm_timeout.py`` reads both numbers from the synthesized template.
"""

from __future__ import annotations

from aws_cdk import Duration

#: ``timeout`` of every chart the platform installs.
HELM_TIMEOUT = Duration.minutes(10)
