"""The FSx for Lustre CSI driver (kubernetes-sigs/aws-fsx-csi-driver) on a static volume: the
driver name, the volume attributes its node plugin reads and how it passes mount options.

Version: driver v1.9.0, shipped by chart 1.17.0 (chart index entry: appVersion 1.9.0). The files
cited are identical at v1.8.0 (chart 1.16.0).
"""

from __future__ import annotations

from tests.contracts.model import Contract, Entry

_REPO = "kubernetes-sigs/aws-fsx-csi-driver@v1.9.0"

#: ``spec.csi.driver`` of a PersistentVolume the driver serves.
DRIVER = Contract(
    consumer="FSx CSI driver (CSI driver registration)",
    version="v1.9.0",
    entries=(
        Entry(
            "fsx.csi.aws.com",
            "the driver's name: kubelet hands a volume to the plugin registered under it",
            f"{_REPO}:pkg/driver/driver.go:43 (DriverName); chart templates/csidriver.yaml",
            required=True,
        ),
    ),
)

#: ``spec.csi.volumeAttributes`` (the CSI volume context) of a static PersistentVolume.
VOLUME_ATTRIBUTES = Contract(
    consumer="FSx CSI driver node plugin (NodePublishVolume)",
    version="v1.9.0",
    entries=(
        Entry(
            "dnsname",
            "the file system's DNS name; mount source '<dnsname>@tcp:/<mountname>'. Missing or "
            "empty: the mount is refused with InvalidArgument 'dnsname is not provided'",
            f"{_REPO}:pkg/driver/controller.go:55; pkg/driver/node.go:108-112,119",
            required=True,
        ),
        Entry(
            "mountname",
            "the Lustre mount name. Missing or empty: 'fsx' is used, which is not the mount name "
            "of a PERSISTENT_2 file system (FSx gives it a random 8-character one)",
            f"{_REPO}:pkg/driver/controller.go:56; pkg/driver/node.go:109,115-116",
            required=True,
        ),
    ),
)

#: PersistentVolume ``spec.mountOptions``: the node plugin adds each one not already present to
#: ``mount -t lustre -o`` (pkg/driver/node.go:159-177); the Lustre client decides what it accepts.
MOUNT_OPTIONS = Contract(
    consumer="FSx CSI driver node plugin -> Lustre client mount",
    version="v1.9.0",
    entries=(
        Entry(
            "flock",
            "cluster-coherent POSIX file locks (what the driver's own static-provisioning example sets)",
            f"{_REPO}:pkg/driver/node.go:159-177; examples/kubernetes/static_provisioning/specs/pv.yaml:11-12",
        ),
    ),
)

#: ``spec.csi.volumeHandle``: the file system ID (the controller's ValidateVolumeCapabilities
#: describes it; no volume attribute carries it).
VOLUME_HANDLE_SOURCE = (
    f"{_REPO}:examples/kubernetes/static_provisioning/specs/pv.yaml:16; pkg/driver/controller.go"
)
