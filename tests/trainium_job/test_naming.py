"""Names built from a prefix: one builder per name, the longest job prefix that fits its pods."""

from __future__ import annotations

from trainium_job.checks import MAX_LABEL, is_dns_label
from trainium_job.naming import (
    HASH_CHARS,
    digest_name,
    hashed_name,
    max_name_prefix,
    platform_stack_name,
    pod_host_name,
    repository_name,
    training_stack_name,
)


def test_given_a_prefix_then_each_aws_name_is_built_from_it():
    assert platform_stack_name("exp") == "exp-platform"
    assert training_stack_name("exp") == "exp-training"
    assert repository_name("exp") == "exp/training"


def test_given_a_job_then_its_pods_are_named_as_volcano_names_them():
    # Volcano names a job's pods PodNameFmt "%s-%s-%d" (job, task, index; volcano-sh/volcano
    # pkg/controllers/job/helpers/helpers.go); its svc plugin makes the pod name the host name
    # (OnPodCreate, pkg/controllers/job/plugins/svc/svc.go).
    assert pod_host_name("bert-0123abcd", 0) == "bert-0123abcd-worker-0"


def test_given_the_longest_prefix_then_the_last_pods_host_name_is_exactly_a_full_label():
    for nodes in (1, 2, 10, 64):
        prefix = "a" * max_name_prefix(nodes)
        host = pod_host_name(digest_name(prefix, "0" * HASH_CHARS), nodes - 1)
        assert len(host) == MAX_LABEL and is_dns_label(host)
    assert max_name_prefix(2) == 45  # what BertPretrainingJob documents for name_prefix


def test_given_a_spec_then_the_hashed_name_is_the_prefix_and_its_digest():
    name = hashed_name("trn-bert", {"a": 1})
    assert (
        name == digest_name("trn-bert", name.rsplit("-", 1)[1]) and len(name) == len("trn-bert-") + HASH_CHARS
    )
