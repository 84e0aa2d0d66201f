"""nodeadm, the EKS AL2023 AMI's node initializer: the NodeConfig it reads from a launch template's
user data, and the feature gate the platform sets.

Version: the AMIs of awslabs/amazon-eks-ami from v20260512 on (the pinned Trainium release is
v20260625). Sources, in that repository: nodeadm/doc/examples.md (MIME user data with a
``Content-Type: application/node.eks.aws`` part; "Enabling fast image pull (experimental)",
L153-173), nodeadm/api/v1alpha1/nodeconfig_types.go L159-170 (the feature gate names),
nodeadm/internal/api/featuregates.go L18-22 (FastImagePull defaults to false),
nodeadm/internal/containerd/config.go L167-187 (ignored below 4 vCPU or 7 GiB),
templates/al2023/provisioners/install-worker.sh L217-221 (soci-snapshotter installed on every
AL2023 variant, NEURON included), CHANGELOG.md (v20250813: the gate as AggressiveImagePull, #2352;
v20250821: renamed FastImagePull, #2381; first tag with f2bdcc06, the sandbox image in the SOCI
store for containerd 2.2.3: v20260512, #2717).
"""

from __future__ import annotations

#: The MIME part's content type EKS passes to nodeadm.
CONTENT_TYPE = "application/node.eks.aws"
API_VERSION = "node.eks.aws/v1alpha1"
KIND = "NodeConfig"
#: Feature gates nodeadm knows (nodeconfig_types.go L159-170).
FEATURE_GATES = ("InstanceIdNodeName", "FastImagePull")
#: The oldest AMI release whose nodeadm has FastImagePull under that name.
FAST_IMAGE_PULL_SINCE = "20250821"
#: The least vCPUs and memory (GiB) with which nodeadm applies the gate (config.go L167-187).
FAST_IMAGE_PULL_MIN_VCPUS = 4
FAST_IMAGE_PULL_MIN_MEMORY_GIB = 7
