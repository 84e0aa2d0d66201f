"""The instance facts table, re-exported from the job contract (``trainium_job.instances``)."""

from trainium_job.instances import INSTANCE_FACTS, InstanceFacts, instance_facts

__all__ = ["INSTANCE_FACTS", "InstanceFacts", "instance_facts"]
