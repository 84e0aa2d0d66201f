"""The kubectl provider that runs Helm for ``aws_eks_v2.HelmChart``, and Helm's timeout, as they
bound each other.

Version: aws-cdk-lib 2.275.0 (read in its jsii package: aws-eks-v2/lib/kubectl-provider.js and
helm-chart.js; custom-resource-handlers/dist/aws-eks-v2/kubectl-handler/helm/__init__.py) with the
kubectl-v35 layer 2.2.2 (Helm 4.1.3).
"""

from __future__ import annotations

#: ``Custom::AWSCDK-EKS-HelmChart`` ``Timeout`` is passed as ``helm ... --timeout <Timeout>``
#: (helm/__init__.py L229-230); unset, helm waits its own default of 300 s (helm v4.1.3
#: pkg/cmd/upgrade.go L284).
HELM_DEFAULT_TIMEOUT_S = 300
#: The handler runs helm with ``subprocess.check_output`` and no timeout (helm/__init__.py L242),
#: inside one invocation (no isComplete step: kubectl-provider.js, ``cr.Provider`` with
#: ``onEventHandler`` only): a Lambda timeout kills helm mid-install (aws/aws-cdk issue 22257).
#: Time the invocation needs besides helm's wait: cold start, ``aws eks update-kubeconfig``, the
#: chart pull, and a chart's short hook Jobs (helm applies ``--timeout`` per stage: v4.1.3
#: pkg/action/install.go L505, L542-544, L551). 120 s is the least; the platform leaves 300.
MARGIN_S = 120
#: What identifies the two functions in the template: the handler's description
#: (kubectl-provider.js) and the framework's entry point (custom-resources provider-framework).
HANDLER_DESCRIPTION = "onEvent handler for EKS kubectl resource provider"
FRAMEWORK_HANDLER = "framework.onEvent"
