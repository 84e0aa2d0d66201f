"""EFA huge pages: the training pods request none and switch libfabric's huge-page buffers off.

Consumer: libfabric's EFA provider (ofiwg/libfabric v2.6.0 prov/efa/src/efa_env.c) reads
``FI_EFA_USE_HUGE_PAGE`` as a boolean (``fi_param_define(&efa_prov, "use_huge_page",
FI_PARAM_BOOL, ...)``; libfabric's booleans accept 0/1, false/true, no/yes, off/on) and by default
uses huge pages for its internal buffers. A pod without a ``hugepages-2Mi`` request gets a hugetlb
cgroup limit of 0 (Kubernetes "Manage HugePages"), and a request on a node that pre-allocated none
stays Pending: the decision is documented in trainium_job/huge_pages.py.
"""

from __future__ import annotations

from tests.trainium_job.rendered import worker_container
from trainium_job.environment import neuron_env
from trainium_job.huge_pages import HUGE_PAGE_ENV

#: libfabric's false spellings of an FI_PARAM_BOOL (src/fabric.c fi_param_get_bool).
LIBFABRIC_FALSE = ("0", "false", "no", "off")


def test_given_the_training_env_then_libfabric_is_told_not_to_use_huge_pages():
    env = neuron_env()
    assert env["FI_EFA_USE_HUGE_PAGE"] in LIBFABRIC_FALSE
    assert HUGE_PAGE_ENV.items() <= env.items()


def test_given_every_instance_type_then_the_training_pod_requests_no_huge_pages():
    for name in ("trn1.32xlarge", "trn1n.32xlarge", "trn2.48xlarge"):
        container = worker_container(instance_type=name)
        resources = container["resources"]
        assert not [k for part in resources.values() for k in part if k.startswith("hugepages-")]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["FI_EFA_USE_HUGE_PAGE"] in LIBFABRIC_FALSE
