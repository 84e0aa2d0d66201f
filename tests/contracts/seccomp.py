"""containerd's default seccomp profile (what ``seccompProfile: RuntimeDefault`` is on EKS), and the
system calls the training container's native libraries make that it gates.

Versions: containerd 2.2.4 on the EKS AL2023 AMIs, NEURON included, from release v20260714 for
Kubernetes 1.30-1.36 (awslabs/amazon-eks-ami CHANGELOG.md, that release's table); 1.7.29 last, on
Kubernetes 1.29 only. RuntimeDefault maps to ``seccomp.WithDefaultProfile()``
(containerd@v2.2.4:internal/cri/sputil/seccomp_linux.go:65-66), the profile of
``contrib/seccomp/seccomp_default.go``: default action ``ActErrno`` (L537; runc returns EPERM:
opencontainers/runc@v1.5.1:libcontainer/seccomp/seccomp_linux.go:20), and groups of calls allowed
only when a capability is in the container's bounding set (``for _, c := range
sp.Process.Capabilities.Bounding``, L621). Line numbers at v2.2.4; the same groups at v1.7.29
(L571-707).
"""

from __future__ import annotations

_PROFILE = "containerd/containerd@v2.2.4:contrib/seccomp/seccomp_default.go"

#: Capability -> the calls the default profile allows only with it (a selection: those a training
#: process could plausibly make; the file has more groups, L623-757).
GATED: dict[str, tuple[tuple[str, ...], str]] = {
    "CAP_SYS_NICE": (
        ("get_mempolicy", "mbind", "set_mempolicy", "set_mempolicy_home_node"),
        f"{_PROFILE}:727-736",
    ),
    "CAP_SYS_ADMIN": (
        ("mount", "umount2", "unshare", "setns", "perf_event_open", "bpf", "clone3"),
        f"{_PROFILE}:629-659",
    ),
    "CAP_SYS_PTRACE": (("ptrace", "process_vm_readv", "process_vm_writev", "kcmp"), f"{_PROFILE}:695-705"),
}
#: Calls in no group: refused whatever the capabilities (no match anywhere in contrib/ at v2.2.4).
NEVER_ALLOWED = ("move_pages", "migrate_pages")
#: Allowed for every container (L218, L227-229, L249-250): CAP_IPC_LOCK has no group of its own, it
#: only lifts the kernel's RLIMIT_MEMLOCK check for a process that keeps it (root in the image).
ALWAYS_ALLOWED = ("mlock", "mlock2", "mlockall", "munlock", "munlockall", "madvise", "sched_setaffinity")

#: What the training container's native libraries call, where their source can be read. ``calls``:
#: the gated or refused calls found (none); ``needs``: what they need from the container instead.
CONSUMERS: dict[str, dict[str, object]] = {
    "libfabric EFA and shm providers": {
        "calls": (),
        "needs": ("CAP_IPC_LOCK",),
        "source": "ofiwg/libfabric@v2.6.0: git grep -w mbind|set_mempolicy|get_mempolicy|move_pages|migrate_pages|"
        "numa_set_membind|numa_alloc_onnode|numa_bind over prov/ src/ include/: no call; fork support is "
        "ibv_fork_init (prov/efa/src/efa_fork_support.c:125,241); buffers are registered (pinned) with the "
        "device, beyond RLIMIT_MEMLOCK only with CAP_IPC_LOCK (capabilities(7), mlock(2))",
    },
    "rdma-core libibverbs": {
        "calls": (),
        "needs": (),
        "source": "linux-rdma/rdma-core@v64.0: ibv_fork_init is madvise(MADV_DONTFORK/DOFORK) "
        "(libibverbs/memory.c:158-159); no mbind, set_mempolicy or move_pages",
    },
    "Neuron driver host memory": {
        "calls": (),
        "needs": (),
        "source": "aws-neuron/aws-neuron-driver neuron_mempool.c:263,632: dma_alloc_coherent on the device, "
        "NUMA-local in the kernel, no user-space mbind",
    },
    "Neuron runtime (libnrt, libnccom)": {
        "calls": (),
        "needs": ("CAP_IPC_LOCK",),
        "source": "closed source: aws-neuron/aws-neuron-sdk@81ce03a never names SYS_NICE, mbind or set_mempolicy; "
        "runtime-performance-tips.rst:93-108 ('internally takes the NUMA layout into account', CPU affinity by "
        "taskset / NEURON_RT_LOW_LATENCY_TASKS_CPU_AFFINITY: sched_setaffinity, always allowed); Neuron's Kubernetes "
        "examples add IPC_LOCK only (deploy/tutorials/inference/k8s-rn50-demo.rst:42,105-108). To confirm on a "
        "Trainium node: strace -f -e trace=mbind,set_mempolicy,move_pages over one step",
    },
}
#: Should a call be refused anyway: libnuma (numactl v2.0.19 libnuma.c) reports EPERM from mbind and
#: set_mempolicy with perror and goes on (L279-285, L312-328; numa_available() is -1 on EPERM,
#: L872-877); only ``numactl --membind`` as a launcher exits. The job runs no numactl.
LIBNUMA_TOLERATES_EPERM = True
