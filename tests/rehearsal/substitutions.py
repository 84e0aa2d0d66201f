"""Everything the offline rehearsal runs differently from the cluster, in one place, each with
its reason. Anything not listed here runs as synthesized: the container commands and their
environment come verbatim from the training stack's template (docs/operations.md, "Offline
rehearsal of the workload").

The values the harness uses for these substitutions are defined here too, next to their entry.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tests.rehearsal import s3_standin
from trainium_eks.storage.model_bucket import BUCKET_NAME_OUTPUT


@dataclass(frozen=True)
class Substitution:
    """One difference from the cluster: what runs there, what runs here instead, and why."""

    cluster: str
    rehearsal: str
    reason: str


#: Added to every pod's environment (the synthesized variables are kept as they are).
EXTRA_ENV = {"OMP_NUM_THREADS": "1"}
#: The ``sleep`` stand-in sleeps this share of what it is asked, and the programs' poll and back-off
#: intervals are shortened by it (30 s polls become 1 s: a whole second at least).
SLEEP_SCALE = 1 / 60
#: The pods' network: gang pod ``i`` has ``<POD_NETWORK>.<WORKER_ADDRESS_BASE + i>``, other pods
#: (staging, TensorBoard) addresses from ``OTHER_ADDRESS_BASE`` on; the bridge they plug into has
#: ``<POD_NETWORK>.1``, where the test reaches them from.
POD_NETWORK = "10.244.0"
WORKER_ADDRESS_BASE = 10
OTHER_ADDRESS_BASE = 100
#: The web stand-in's address on the bridge (tests/rehearsal/web_standin.py): "the internet".
WEB_ADDRESS = f"{POD_NETWORK}.2"
#: MTU of the pods' eth0: the VPC's jumbo frames (EC2 User Guide, "Network maximum
#: transmission unit (MTU) for your EC2 instance": 9001 within a VPC).
POD_MTU = 9001
#: The cluster DNS domain the kubelet writes into each pod's /etc/hosts line.
CLUSTER_DOMAIN = "cluster.local"
#: ``spec.nodeName`` of gang pod ``i`` (each on a node of its own), and of the other pods.
NODE_NAME = "rehearsal-node-{}"
SYSTEM_NODE_NAME = "rehearsal-system-node"
#: User and group IDs the rehearsal's user namespace maps, each to the same ID on this machine,
#: where the harness may map more than its own (tests/rehearsal/cluster.py ``id_range_mappable``):
#: a pod's runAsUser and runAsGroup (nobody, 65534, among them) are real IDs in the pod and on the
#: files it writes.
ID_RANGE = 65536
#: The fabric check's all-reduce buffer per worker in the rehearsal (the job's is 128 MiB).
FABRIC_CHECK_SIZE_MIB = 8
#: The stack outputs the rehearsal has a value for, by output name, where a pod reads one (a
#: ConfigMap's value that CloudFormation fills in at deploy, ``Fn::GetStackOutput``): the
#: platform's model bucket is the S3 stand-in's bucket.
STACK_OUTPUT_STANDINS = {BUCKET_NAME_OUTPUT: s3_standin.BUCKET}
#: The programs whose one argument is a JSON description (``python -m <module> '<json>'``).
JSON_PROGRAMS = ("trainium_job.pod_program", "trainium_job.dataset_runner", "training.launch.submit")


def _shortened(seconds: int) -> int:
    return max(1, round(seconds * SLEEP_SCALE))


def _rehearsed(description: dict[str, Any]) -> dict[str, Any]:
    """A program's description with its waits' polls, its back-off and the fabric check's buffer
    shortened (the deadlines are the synthesized ones)."""
    out = json.loads(json.dumps(description))
    for wait in [*out.get("waits", []), *(w for p in out.get("phases", []) for w in p.get("waits", []))]:
        wait["poll_s"] = _shortened(wait["poll_s"])
    if "backoff_s" in out:
        out["backoff_s"] = _shortened(out["backoff_s"])
    if out.get("budget"):
        out["budget"]["check_every_s"] = _shortened(out["budget"]["check_every_s"])
    measure = (out.get("fabric_check") or {}).get("measure")
    if measure:
        measure[measure.index("--size_mib") + 1] = str(FABRIC_CHECK_SIZE_MIB)
    return out


def _json_program(argv: Sequence[str]) -> bool:
    """Whether ``argv`` runs a program of :data:`JSON_PROGRAMS` with its description last:
    ``python -m <module> '<json>'``, or ``python -c '<code>' ... '<json>'`` whose code runs the
    module with runpy (how a pod whose image lacks the library starts it from its runtime folder)."""
    if len(argv) == 4 and argv[:2] == ["python", "-m"]:
        return argv[2] in JSON_PROGRAMS
    if len(argv) >= 4 and argv[:2] == ["python", "-c"]:
        found = re.search(r"runpy\.run_module\(\s*['\"]([\w.]+)['\"]", argv[2])
        return found is not None and found.group(1) in JSON_PROGRAMS
    return False


def rehearsed_command(command: Sequence[str]) -> tuple[str, ...]:
    """A container command as the rehearsal runs it: verbatim, but for a JSON program's polls and
    back-off (:data:`SLEEP_SCALE`) and the fabric check's all-reduce buffer (``--size_mib``, set to
    :data:`FABRIC_CHECK_SIZE_MIB`)."""
    argv = list(command)
    if _json_program(argv):
        argv[-1] = json.dumps(_rehearsed(json.loads(argv[-1])), sort_keys=True, separators=(",", ":"))
    return tuple(argv)


SUBSTITUTIONS: tuple[Substitution, ...] = (
    Substitution(
        "a pod on a node (kubelet, container runtime)",
        "a process tree in its own network, mount, UTS and PID namespaces (`unshare`), in the "
        "rehearsal's one user namespace; the container command is its PID 1, run with `env -i` "
        "and the pod's environment",
        "the command runs as the kubelet runs it: PID 1 gets the SIGTERM, and when PID 1 ends the "
        "kernel ends the rest of the pod; its mounts and host name are its own",
    ),
    Substitution(
        "the image's file system",
        "this machine's top-level folders bound into a fresh root (`pod_root.sh`), the venv first "
        "on PATH (python, torchrun, tensorboard) for the base image's software. The library's "
        "images (docker/, by container name): the checkout as the Dockerfile's WORKDIR (its ENV "
        "applied with the WORKDIR path replaced by the checkout's). An image the template builds "
        "from a folder (a job of the user's own image, the tools image of its init container, "
        "found by the container's image tag among the template's image builds): the files its "
        "Dockerfile's COPYs take from that build's context (the cloud assembly's asset, what the "
        "build downloads; `manifests.copy_as_docker_would`), a copy per container bound at its "
        "WORKDIR, the working directory, its ENV as written; files COPYed outside the WORKDIR are "
        "not shown. A folder of this machine on the way to the software that other users may not "
        "pass (/root, where the venv's Python lives), or holding a WORKDIR or a mount point this "
        "machine lacks (/opt for /opt/trainium-bert), is shown as an empty 0755 folder holding "
        "only the software",
        "no container runtime or image build offline; the training code is the same files, and "
        "an image of the user's or the tools image holds only what its Dockerfile copies, so a "
        "COPY left out fails here as in the pod; an image keeps its software where any user can "
        "run it, and the harness user's home is no part of it",
    ),
    Substitution(
        "a pod's init containers (the runtime's copy of the library into a pod whose image "
        "lacks it), run by the kubelet in the pod before its container",
        "each run to its end before the next container starts, as a process tree of its own "
        "(`unshare`: its own network, mount, UTS and PID namespaces, its network plugged in at "
        "the pod's address, the pod's host name), with its own image, securityContext, /tmp and "
        "log (`<pod folder>/init/<name>/log.txt`), sharing the pod's folder (its emptyDir and "
        "configMap volumes); one that ends non-zero ends the pod with its code and the container "
        "never starts (restartPolicy Never)",
        "what crosses from an init container to the container is the pod's volumes, which are "
        "the same folders here; one network namespace for both would need the pod's PID 1 to be "
        "something other than the container's command",
    ),
    Substitution(
        "torch-neuronx 2.9 on Trainium (device xla)",
        "the venv's torch (CPU build): `training.trainer.device.select_device('auto')` picks cpu and gloo "
        "because neither torch-neuronx nor torch-xla is installed; `env -i` keeps PJRT_DEVICE out",
        "no Trainium here; the device layer is the one place that differs (training/trainer/device.py)",
    ),
    Substitution(
        "the pod's CPUs (124 vCPU requested)",
        f"{', '.join(f'{k}={v}' for k, v in EXTRA_ENV.items())} added to every pod",
        "4 workers and 2 agents share 2 cores; torch's default thread pools would oversubscribe them",
    ),
    Substitution(
        "the cluster network (VPC CNI) and the ports of each pod",
        f"a network namespace per pod, its eth0 a veth (MTU {POD_MTU}) on one bridge in the "
        f"rehearsal's own user and network namespaces; pods get {POD_NETWORK}.x addresses",
        "each pod has its own ports, as on the cluster: every gang pod's LOCAL_RANK 0 serves "
        "metrics on 9400, which one shared namespace could not hold twice; the synthesized ports "
        "(rendezvous 29400, metrics 9400, TensorBoard 6006) meet nothing else on this machine; "
        "traffic between a pod's own workers stays on its loopback, so eth0 carries exactly "
        "what crosses between pods",
    ),
    Substitution(
        "Volcano's svc plugin and the cluster DNS (hostname `<job>-worker-<i>`, subdomain `<job>`)",
        "each gang pod's host name set in its UTS namespace; one /etc/hosts bound into every pod "
        "with the kubelet's line for each gang pod (FQDN, `<job>-worker-<i>.<job>`, short name)",
        "the rendezvous endpoint `<job>-worker-0.<job>:29400` must resolve to pod 0, and torch "
        "decides which agent hosts the store by comparing that name's address with its own",
    ),
    Substitution(
        "Volcano's env plugin (`VC_TASK_INDEX`, `VK_TASK_INDEX` in every container of the Job)",
        "set by the harness to the gang pod's index, when the synthesized Job lists the plugin",
        "pod 0 alone exports each phase's model; without the plugin no pod would",
    ),
    Substitution(
        "the kubelet's restart of a DaemonSet pod's container that ended (CrashLoopBackOff), and "
        "the kernel's OOM kill of a container's process",
        "the harness SIGKILLs the pod's PID 1 from outside (no-verdict scene), waits "
        "1 s and runs the same container command again in the same pod folder (its emptyDir "
        "volumes kept, the log continued), in a fresh network namespace plugged in at the pod's "
        "address",
        "the kubelet's back-off starts at 10 s and doubles up to 5 minutes; shortened as the "
        "scene's verdict bound is (20 s for the 3,660 s of a trn1.32xlarge)",
    ),
    Substitution(
        "the downward API's `spec.nodeName` (NODE_NAME, which the fabric check names)",
        f"set by the harness as the kubelet would: gang pod i is on node `{NODE_NAME.format('i')}`",
        "no nodes; one gang pod per node, as the gang's resources force on the cluster",
    ),
    Substitution(
        "the container's writable layer",
        "a fresh folder per container at /tmp (unless a volume is mounted there), read-only with "
        "a read-only root; the rest of the image's file system is this machine's (but for an "
        "image's WORKDIR of its own files, a copy per container)",
        "pods write their own files there (the fabric check's result, torchrun's logs); one "
        "shared /tmp would let one pod read the other's result",
    ),
    Substitution(
        "the FSx claim (PersistentVolumeClaim)",
        "one temporary folder, bound at the claim's mountPath in every pod (read-only where the "
        "pod mounts it read-only)",
        "the pods meet only through it, as on the cluster",
    ),
    Substitution(
        "emptyDir volumes",
        "a fresh temporary folder per pod and volume, mode 0777 as the kubelet makes it, the same "
        "folder in each of the pod's containers that mounts the volume (a tmpfs for `medium: "
        "Memory`, per container: refused in an init container)",
        "same lifetime as on the cluster: one pod; any user the pod runs as may write there; an "
        "init container's copy is there for the container",
    ),
    Substitution(
        "neuron_parallel_compile (Neuron SDK)",
        "tests/rehearsal/standins.py: runs the command with the trial-run environment the real "
        "tool sets (NEURON_PARALLEL_COMPILE, NEURON_EXTRACT_GRAPHS_ONLY, NEURON_FALL_BACK_TO_NULL_NEFF), "
        "passes SIGTERM on to it (what the real tool does with one is not documented), then marks "
        "the cache set named by NEURON_CC_FLAGS",
        "the compiler needs Trainium; the script's side (the trial run, the cache marker) is what "
        "the rehearsal checks",
    ),
    Substitution(
        "the node's Neuron driver version (`/sys/module/neuron/version`, which "
        "`training.node.driver_check` reads first in every gang pod)",
        "a folder bound over /sys/module in each gang pod holding only `neuron/version`, with a "
        "recorded string (tests/training/node/recorded/neuron_versions: that of the EKS Neuron AMI "
        "release the platform pins by default, or of a release with a driver the runtime refuses)",
        "no Neuron driver here; the recordings say where each string comes from",
    ),
    Substitution(
        "dpkg-query (the image's dpkg, for the version of aws-neuronx-runtime-lib)",
        "tests/rehearsal/standins.py: prints the recorded version of the Neuron DLC's runtime "
        "package (tests/training/node/recorded/neuron_versions) for exactly that query; refuses others",
        "the image's packages are not on this machine",
    ),
    Substitution(
        "the node's EFA devices (`/sys/class/infiniband`, which the fabric check reads)",
        "tests/rehearsal/efa.py: a folder bound over /sys/class in each gang pod holding one EFA "
        "device with one port, whose tx_bytes and rx_bytes a harness thread raises every "
        "0.1 s by the bytes the pod's eth0 sent and received (frozen to play a TCP fallback); "
        "on the deep check's nodes, the instance type's count of devices, every port up (one "
        "device fewer on the node with an EFA fault: the efa driver reports every port it lists "
        "ACTIVE, so a missing device is the fault a node shows)",
        "no EFA here; the counters move with the bytes that really cross between the pods, so "
        "the check's 'bytes crossed EFA' test judges real traffic; a frozen device is what a "
        "node whose collectives fell back to sockets shows",
    ),
    Substitution(
        "the fabric check's all-reduce of 128 MiB per worker",
        f"{FABRIC_CHECK_SIZE_MIB} MiB (`--size_mib` in the synthesized description, with the polls the "
        "edits of a container command: `rehearsed_command`); the variant's floor "
        "(training_fabric_check_min_busbw_gbps) is 0",
        "128 MiB takes ~40 s per check on 2 busy cores through gloo, which reaches ~0.2 GB/s "
        "there: below the smallest whole-number floor (1), so the check's bandwidth test is "
        "left to the unit tests on recorded results",
    ),
    Substitution(
        "neuron-ls (Neuron tools; `neuron-ls --json-output`, the deep check's devices check)",
        "tests/rehearsal/standins.py: the recorded JSON of the instance type "
        "(tests/training/node/recorded/health), less one device on the deep-check scene's node "
        "with a device fault; no answer at all on the no-verdict scene's nodes",
        "needs the Neuron driver; the recording follows the Neuron documentation's samples",
    ),
    Substitution(
        "nccom-test (Neuron tools; the deep check's all-reduce)",
        "tests/rehearsal/standins.py: the recorded all-reduce output of the instance type (a 16-rank "
        "run of the Neuron documentation for the trn1.32xlarge's 32 ranks) for an `allr -r N ... "
        "--check` call, the documentation's failed run (exit 1) on the scene's node with a "
        "collective fault; refuses others",
        "needs NeuronCores and NeuronLink; the check's parsing and floor are what it feeds",
    ),
    Substitution(
        "the deep check's compute on each NeuronCore (torch-neuronx)",
        "tests/rehearsal/torch_xla_standin.py, first on the deep check's pods' PYTHONPATH: "
        "`torch_xla.device()` is the CPU, so `core_main` takes the image's XLA branch; one process "
        "per NeuronCore of the instance type, as on the node. On the scene's node with a compute "
        "fault, one core's products come out with one element off by one (a core that computes "
        "wrong without an error)",
        "no NeuronCores here; each process loads torch (about 2 s of CPU), so the scene's four "
        "trn1.32xlarge nodes that reach the compute check cost 128 of them",
    ),
    Substitution(
        "the Kubernetes API server (the deep check labels and taints its Node, records Events) and "
        "the in-cluster configuration the kubelet gives the pod",
        "tests/rehearsal/kube_api.py: an HTTPS server on the bridge (self-signed certificate from "
        "`openssl`) holding the scene's Nodes: GET, strategic-merge PATCH with the resourceVersion "
        "checked, POST of Events; every request recorded. The deep check's pod gets "
        "KUBERNETES_SERVICE_HOST/PORT and the ServiceAccount's token, ca.crt and namespace at "
        "/var/run/secrets/kubernetes.io/serviceaccount (a fresh /run, as in a container)",
        "no cluster; the tests check the requests and the resulting objects with the Kubernetes "
        "schemas (kubernetes-validate), not with the code's own constants",
    ),
    Substitution(
        "EC2 TerminateInstances (a failed node replaced) and the pod's AWS identity",
        "the same server answers EC2's query API; the pod gets AWS_ENDPOINT_URL_EC2 (botocore's "
        "service endpoint variable), AWS_CA_BUNDLE, stand-in access keys and "
        "AWS_EC2_METADATA_DISABLED",
        "no AWS; the call is recorded and checked against botocore's EC2 model",
    ),
    Substitution(
        "a variable from a ConfigMap's key (`valueFrom.configMapKeyRef`), resolved by the kubelet "
        "at the container's start",
        "resolved by the harness from the template's ConfigMaps as the kubelet does "
        "(tests/rehearsal/manifests.py `config_map_env`): the key's value; a ConfigMap or key not "
        "there leaves the variable unset when the reference is optional, and otherwise is refused "
        "(the kubelet would not start the container: CreateContainerConfigError)",
        "no API server holds the ConfigMaps; the template applies them before the pods that read them",
    ),
    Substitution(
        f"the platform's model bucket: a CloudFormation output (`{BUCKET_NAME_OUTPUT}` of the "
        "platform stack, `Fn::GetStackOutput`) in the value of the ConfigMap the training pods read "
        "its name from",
        f"the S3 stand-in's bucket (`{s3_standin.BUCKET}`, tests/rehearsal/s3_standin.py: moto's S3 "
        "API on the bridge, versioned as the model bucket is), for that output only and only in a "
        "scene that starts the stand-in; a pod reading any other stack output is refused",
        "the bucket and its name exist only once the platform is deployed; the pods read the name "
        "from the ConfigMap as on the cluster, so a wrong ConfigMap name or key fails here as there",
    ),
    Substitution(
        "EKS Pod Identity: the webhook's variables (AWS_CONTAINER_CREDENTIALS_FULL_URI, "
        "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE) and token volume in every pod of a ServiceAccount "
        "that a Pod Identity association names, and the agent that answers with the role's "
        "credentials",
        "in a scene with the S3 stand-in, the stand-in's environment (`S3StandIn.env`: "
        "AWS_ENDPOINT_URL_S3, botocore's S3-only endpoint variable, stand-in access keys, the "
        "region, AWS_EC2_METADATA_DISABLED) added to every container of a pod whose "
        "serviceAccountName the template's `AWS::EKS::PodIdentityAssociation` names in the "
        "workload's namespace",
        "no AWS; moto takes any credentials, so the role's policy (the prefixes it may write) is "
        "not played here: tests/trainium_eks/jobs/test_model_writer.py and "
        "tests/trainium_eks/storage/test_model_bucket.py check it on the template",
    ),
    Substitution(
        "the DaemonSet controller and the scheduler (deep-check scene)",
        "the test: starts the DaemonSet's pod on each node it selects and tolerates, deletes it "
        "(SIGTERM) once its node no longer matches the DaemonSet's node affinity (labelled), then "
        "matches the gang's nodeSelector and tolerations against the Nodes (tests/rehearsal/kube_api.py "
        "`schedulable`, `gang_placement`: one pod per node, the whole gang or none)",
        "no cluster; the scene is about what the check does to its Node and where that lets the gang go",
    ),
    Substitution(
        "an https:// download from the internet (the held-out staging Job's PG-19 Parquet file at "
        "huggingface.co, fetched with urllib)",
        f"tests/rehearsal/web_standin.py: an HTTPS server at {WEB_ADDRESS}:443 on the bridge, in a scene "
        "that starts it, answering the synthesized URL's path only (404 for any other) with a Parquet "
        "file of PG-19's columns holding synthetic books (training.dataprep.synthetic "
        "`pg19_parquet`); every pod's /etc/hosts names it for the URL's host, and SSL_CERT_FILE (OpenSSL's "
        "default verify file, which Python's default TLS context reads) holds its self-signed "
        "certificate for that host name",
        "no network; the URL, the host name check and the download code are the pod's own, and the "
        "books are made from another corpus than the training shards, with their vocabulary",
    ),
    Substitution(
        "aws s3 cp of the dataset source (the public BERT tar)",
        "tests/rehearsal/standins.py: streams a local tar of small shards made by "
        "training.dataprep.synthetic, for the synthesized source URL only",
        "no network; the public tar is ~50 GB",
    ),
    Substitution(
        "the pod program's, the submitter's and the dataset pods' poll and back-off intervals",
        f"{SLEEP_SCALE:.3g} of the synthesized seconds, at least 1 s (`rehearsed_command`: the waits' "
        "`poll_s`, the dataset runner's `backoff_s`, the spend's `check_every_s`); their deadlines and "
        "the spend ceiling are the synthesized ones",
        "the waits look for their markers every 30 s, the staging retries a minute apart and the pods "
        "count their spend every minute",
    ),
    Substitution(
        "the downward API's `metadata.labels['batch.kubernetes.io/job-name']` and "
        "`['batch.kubernetes.io/controller-uid']` of a batch Job's pod",
        "set by the harness to the Job's name from the template and a random UID",
        "no Job controller; the dataset runner names its Job in its failed marker, the submitter its "
        "owner in the Volcano Job it creates",
    ),
    Substitution(
        "Volcano creating the gang's pods once the submitter has created the Volcano Job",
        "the harness starts the gang's pods once the stand-in API server holds the Volcano Job, "
        "from the pod template of the ConfigMap the submitter mounts (compared with what it sent)",
        "no Volcano controller; the scene is about when the gang is asked for, not how Volcano makes pods",
    ),
    Substitution(
        "Volcano and the kubelet (gang start, pod deletion, the Job's policies)",
        "the test: starts the gang's pods together, sends SIGTERM to a pod's PID 1 and SIGKILL "
        "after its terminationGracePeriodSeconds, applies the Job's first policy that matches a "
        "failed pod (an exit code, else PodFailed): RestartJob starts the same commands again, "
        "AbortJob stops the others and starts nothing",
        "no cluster; the rehearsal is about what the commands do with those events",
    ),
    Substitution(
        "the pod's and container's securityContext (runAsUser, runAsGroup, supplementalGroups, "
        "readOnlyRootFilesystem, allowPrivilegeEscalation, capabilities, runAsNonRoot)",
        "resolved as Kubernetes does (the container's over the pod's, the image's USER where "
        "neither sets one; tests/rehearsal/manifests.py `security`) and applied: the rehearsal's "
        f"user namespace maps IDs 0 to {ID_RANGE - 1} each to this machine's same ID, `setpriv` runs "
        "the command as that user and group, with that capability set as bounding set (kept by "
        "root, none left to another user) and no_new_privs; a read-only root is bind remounts of "
        "the image's mounts in the pod's mount namespace, the volumes keeping their modes; "
        "runAsNonRoot with a root user does not start. Where the harness is not root (no ID range "
        "can be mapped without newuidmap), only root is mapped and every pod runs as root. Not "
        "played: seccomp profiles, SELinux and AppArmor; fsGroup and privileged are refused",
        "a pod that writes outside its volumes, or needs a capability or a user it does not "
        "declare, fails here as on the cluster (the TensorBoard pod runs as nobody on a "
        "read-only root, the staging pod as root without capabilities)",
    ),
    Substitution(
        "resources, node selectors, tolerations, devices",
        "not applied outside the deep-check scene (pods run unlimited, without Neuron or EFA "
        "device files: only the sysfs stand-ins above)",
        "checked on the manifests by the other tests (tests/trainium_eks/test_pod_security.py, "
        "test_training_job.py); FI_* and NEURON_* variables pass through to code that ignores them",
    ),
)
