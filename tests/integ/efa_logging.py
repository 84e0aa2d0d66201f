"""The variant's one change to the training job: the collectives log at INFO, so the OFI plugin's
provider line shows in the pod logs (the Neuron training troubleshooting guide turns Neuron's
collectives logging on with ``NCCL_DEBUG`` and ``NCCL_DEBUG_SUBSYS``; the provider line is logged
with the INIT and NET flags, aws-ofi-nccl ``src/nccl_ofi_net.cpp``).

The job's manifest is rendered once, in Python, and its submitter creates it from a ConfigMap
(trainium_eks.jobs.job_submission); the Volcano Job is re-rendered with the extra variables and
put back into that ConfigMap with a property override, which carries the prune label that
``aws_eks_v2.KubernetesManifest`` adds to each object (``aws.cdk.eks/prune-<construct address>``,
aws-cdk-lib ``aws-eks-v2/lib/k8s-manifest.ts`` ``injectPruneLabel``). ``tests/integ`` checks that
the job differs from the library's in these variables only.
"""

from __future__ import annotations

import copy
from typing import Any

from aws_cdk import CfnResource, Stack

from trainium_eks import BertPretrainingJob
from trainium_job.submission import MANIFEST_KEY

#: Added to the training container's environment.
COLLECTIVES_LOGGING = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT"}
PRUNE_LABEL_PREFIX = "aws.cdk.eks/prune-"


def with_collectives_logging(job: dict[str, Any]) -> dict[str, Any]:
    """A copy of the Volcano Job with :data:`COLLECTIVES_LOGGING` in every container."""
    patched = copy.deepcopy(job)
    for task in patched["spec"]["tasks"]:
        for container in task["template"]["spec"]["containers"]:
            container["env"] = [
                *container.get("env", []),
                *({"name": k, "value": v} for k, v in COLLECTIVES_LOGGING.items()),
            ]
    return patched


def log_collectives(job: BertPretrainingJob) -> None:
    """Override the job's ConfigMap (what its submitter creates) with :func:`with_collectives_logging`."""
    if job.submission is None:
        raise TypeError(f"{job.node.path}: the job has no submitter, whose ConfigMap this patches")
    config_map = job.submission.config_map
    resource = config_map.node.default_child
    if not isinstance(resource, CfnResource):
        raise TypeError(f"{config_map.node.path}: no CfnResource under the manifest")
    stack = Stack.of(job)
    namespace = job.job["metadata"]["namespace"]
    patched = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": job.job_name,
            "namespace": namespace,
            "labels": {PRUNE_LABEL_PREFIX + config_map.node.addr: ""},
        },
        "data": {MANIFEST_KEY: stack.to_json_string(with_collectives_logging(job.job))},
    }
    resource.add_property_override("Manifest", stack.to_json_string([patched]))
