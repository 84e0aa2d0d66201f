"""The variant's one change to the training job: the collectives log at INFO, so the OFI plugin's
provider line shows in the pod logs (the Neuron training troubleshooting guide turns Neuron's
collectives logging on with ``NCCL_DEBUG`` and ``NCCL_DEBUG_SUBSYS``; the provider line is logged
with the INIT and NET flags, aws-ofi-nccl ``src/nccl_ofi_net.cpp``).

The job's manifest is rendered once, in Python; the Volcano Job is re-rendered with the extra
variables and put back with a property override, with the prune label that
``aws_eks_v2.KubernetesManifest`` adds to each object (``aws.cdk.eks/prune-<construct address>``,
aws-cdk-lib ``aws-eks-v2/lib/k8s-manifest.ts`` ``injectPruneLabel``). ``tests/integ`` checks that
the override differs from the library's manifest in these variables only.
"""

from __future__ import annotations

import copy
from typing import Any

from aws_cdk import CfnResource, Stack

from trainium_eks import BertPretrainingJob

#: Added to the training container's environment.
COLLECTIVES_LOGGING = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT"}
PRUNE_LABEL_PREFIX = "aws.cdk.eks/prune-"


def with_collectives_logging(job: dict[str, Any], prune_label: str) -> dict[str, Any]:
    """A copy of the Volcano Job with :data:`COLLECTIVES_LOGGING` in every container."""
    patched = copy.deepcopy(job)
    labels = patched["metadata"].get("labels", {})
    patched["metadata"]["labels"] = {prune_label: "", **labels}
    for task in patched["spec"]["tasks"]:
        for container in task["template"]["spec"]["containers"]:
            container["env"] = [
                *container.get("env", []),
                *({"name": k, "value": v} for k, v in COLLECTIVES_LOGGING.items()),
            ]
    return patched


def log_collectives(job: BertPretrainingJob) -> None:
    """Override the job's applied manifest with :func:`with_collectives_logging`."""
    resource = job.manifest.node.default_child
    if not isinstance(resource, CfnResource):
        raise TypeError(f"{job.manifest.node.path}: no CfnResource under the manifest")
    patched = with_collectives_logging(job.job, PRUNE_LABEL_PREFIX + job.manifest.node.addr)
    resource.add_property_override("Manifest", Stack.of(job).to_json_string([patched]))
