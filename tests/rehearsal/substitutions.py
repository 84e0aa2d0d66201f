"""Everything the offline rehearsal runs differently from the cluster, in one place, each with
its reason. Anything not listed here runs as synthesized: the container commands and their
environment come verbatim from the training stack's template (docs/operations.md, "Offline
rehearsal of the workload").

The values the harness uses for these substitutions are defined here too, next to their entry.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Substitution:
    """One difference from the cluster: what runs there, what runs here instead, and why."""

    cluster: str
    rehearsal: str
    reason: str


#: Added to every pod's environment (the synthesized variables are kept as they are).
EXTRA_ENV = {"OMP_NUM_THREADS": "1"}
#: The ``sleep`` stand-in sleeps this share of what it is asked (30 s polls become 0.5 s).
SLEEP_SCALE = 1 / 60
#: Loopback address of gang pod ``i`` is ``127.0.0.<WORKER_ADDRESS_BASE + i>``; other pods
#: (staging, TensorBoard) get addresses from ``OTHER_ADDRESS_BASE`` on.
WORKER_ADDRESS_BASE = 10
OTHER_ADDRESS_BASE = 100
#: The cluster DNS domain the kubelet writes into each pod's /etc/hosts line.
CLUSTER_DOMAIN = "cluster.local"

SUBSTITUTIONS: tuple[Substitution, ...] = (
    Substitution(
        "a pod on a node (kubelet, container runtime)",
        "a process tree in its own user, mount, UTS and PID namespaces (`unshare`); the container "
        "command is its PID 1, run with `env -i` and the pod's environment",
        "the command runs as the kubelet runs it: PID 1 gets the SIGTERM, and when PID 1 ends the "
        "kernel ends the rest of the pod; its mounts and host name are its own",
    ),
    Substitution(
        "the image's file system",
        "this machine's top-level folders bound into a fresh root (`pod_root.sh`), the checkout "
        "as the Dockerfile's WORKDIR (its ENV applied with the WORKDIR path replaced by the "
        "checkout's), the venv first on PATH (python, torchrun, tensorboard)",
        "no container runtime or image build offline; the training code is the same files",
    ),
    Substitution(
        "torch-neuronx 2.9 on Trainium (device xla)",
        "the venv's torch (CPU build): `training.device.select_device('auto')` picks cpu and gloo "
        "because neither torch-neuronx nor torch-xla is installed; `env -i` keeps PJRT_DEVICE out",
        "no Trainium here; the device layer is the one place that differs (training/device.py)",
    ),
    Substitution(
        "the pod's CPUs (124 vCPU requested)",
        f"{', '.join(f'{k}={v}' for k, v in EXTRA_ENV.items())} added to every pod",
        "4 workers and 2 agents share 2 cores; torch's default thread pools would oversubscribe them",
    ),
    Substitution(
        "the cluster network (VPC CNI, EFA)",
        "one network namespace with only loopback, shared by every pod; pods get 127.0.0.x addresses",
        "the synthesized ports (rendezvous 29400, TensorBoard 6006) are fixed: in their own "
        "namespace they meet nothing else on this machine",
    ),
    Substitution(
        "Volcano's svc plugin and the cluster DNS (hostname `<job>-worker-<i>`, subdomain `<job>`)",
        "each gang pod's host name set in its UTS namespace; one /etc/hosts bound into every pod "
        "with the kubelet's line for each gang pod (FQDN, `<job>-worker-<i>.<job>`, short name)",
        "the rendezvous endpoint `<job>-worker-0.<job>:29400` must resolve to pod 0, and torch "
        "decides which agent hosts the store by comparing that name's address with its own",
    ),
    Substitution(
        "the FSx claim (PersistentVolumeClaim)",
        "one temporary folder, bound at the claim's mountPath in every pod (read-only where the "
        "pod mounts it read-only)",
        "the pods meet only through it, as on the cluster",
    ),
    Substitution(
        "emptyDir volumes",
        "a fresh temporary folder per pod (a tmpfs for `medium: Memory`)",
        "same lifetime as on the cluster: one pod",
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
        "neuron-ls (Neuron tools)",
        "tests/rehearsal/standins.py: a trn1.32xlarge's devices as the Neuron documentation "
        "lists them, laid out as a recorded neuron-ls output",
        "needs the Neuron driver",
    ),
    Substitution(
        "aws s3 cp of the dataset source (the public BERT tar)",
        "tests/rehearsal/standins.py: streams a local tar of small shards made by "
        "training.synthetic, for the synthesized source URL only",
        "no network; the public tar is ~50 GB",
    ),
    Substitution(
        "sleep (coreutils)",
        f"tests/rehearsal/standins.py: sleeps {SLEEP_SCALE:.3g} of the time asked",
        "the workers poll for the dataset marker every 30 s",
    ),
    Substitution(
        "Volcano and the kubelet (gang start, pod deletion, RestartJob)",
        "the test: starts the gang's pods together, sends SIGTERM to a pod's PID 1 and SIGKILL "
        "after its terminationGracePeriodSeconds, starts the same commands again as the restart",
        "no cluster; the rehearsal is about what the commands do with those events",
    ),
    Substitution(
        "security contexts, resources, node selectors, tolerations, devices",
        "not applied (pods run as this machine's user, unlimited, without Neuron or EFA devices)",
        "checked on the manifests by the other tests (tests/trainium_eks/test_pod_security.py, "
        "test_training_job.py); FI_* and NEURON_* variables pass through to code that ignores them",
    ),
)
