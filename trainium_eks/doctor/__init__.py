"""``make doctor``: read-only checks, before the first deploy, that the account can hold the platform.

For the configured region, AZ IDs, instance type and node count it asks AWS (with the caller's
credentials; nothing is created) and prints one line per check, ``ok|warn|FAIL <check>: <what was
found>; <fix>``: the Trn vCPU quota, the instance type in the Trainium AZ ID, a configured
reservation or Capacity Block, the Kubernetes version in EKS, the CDK bootstrap version, the base
image, the dataset sources (their sizes and staging times against the waits derived from the sizes
synth assumes), the VPC and Elastic IP quotas, and once the platform is deployed, its
model bucket (TLS only, encrypted, no public access). It exits 1 when any line is FAIL
(a deployment would fail on it); ``warn`` lines (could not tell, or a cost to know of) are not
blockers. The IAM actions it needs: :data:`~.aws.IAM_ACTIONS`.

Run it as ``make doctor ARGS="-c desired_nodes=4"`` or ``python -m trainium_eks.doctor``.
"""

from .aws import IAM_ACTIONS, BotoClients, Clients
from .findings import Finding, Status, Verdict
from .requirement import BootstrapRequirement, bootstrap_requirement
from .runner import CHECKS, Check, main, run_checks

__all__ = [
    "BootstrapRequirement",
    "BotoClients",
    "CHECKS",
    "Check",
    "Clients",
    "Finding",
    "IAM_ACTIONS",
    "Status",
    "Verdict",
    "bootstrap_requirement",
    "main",
    "run_checks",
]
