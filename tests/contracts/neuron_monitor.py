"""neuron-monitor and its Prometheus exporter (``neuron-monitor-prometheus.py``, aws-neuronx-tools),
as the platform's DaemonSet, alerts and dashboard read them.

Version: the image ``public.ecr.aws/neuron/neuron-monitor:1.3.0`` (trainium_eks.versions). Sources:
the Neuron Monitor User Guide (aws-neuron/aws-neuron-sdk ``tools/neuron-sys-tools/
neuron-monitor-user-guide.rst``; line numbers at tag v2.32.0, a3247f5b, the same at 81ce03ae) and
Neuron's DaemonSet (``src/k8/k8s-neuron-monitor-daemonset.yml``). The exporter script is installed
from aws-neuronx-tools to ``/opt/aws/neuron/bin/neuron-monitor-prometheus.py`` (guide L852-857) and
is in no public repository: what it does is quoted from copies of it, to be re-read in the image.
"""

from __future__ import annotations

from tests.contracts.model import Contract, Entry

_UG = "aws-neuron/aws-neuron-sdk@v2.32.0:tools/neuron-sys-tools/neuron-monitor-user-guide.rst"
_NMP = (
    "neuron-monitor-prometheus.py (aws-neuronx-tools) process_execution_stats: the error_summary keys "
    "become the error_type label unchanged"
)

#: ``execution_errors_total{error_type}``: the ``error_summary`` keys of ``execution_stats`` (JSON
#: example L451-456, definitions L489-497: "error counts for the captured period indexed by their type").
ERROR_TYPES = Contract(
    consumer="neuron-monitor execution_stats.error_summary (execution_errors_total{error_type})",
    version="neuron-monitor 1.3.0 (Neuron Monitor User Guide at v2.32.0)",
    entries=(
        Entry("generic", "generic execution errors", f"{_UG}:492; {_NMP}"),
        Entry(
            "numerical",
            "NaN errors during execution (the list at L493 spells it 'numeric'; the JSON key, and so the label, "
            "is 'numerical', L452)",
            f"{_UG}:452,493; {_NMP}",
        ),
        Entry("transient", "recoverable errors, such as ECC corrections", f"{_UG}:494; {_NMP}"),
        Entry("model", "model-related errors", f"{_UG}:495; {_NMP}"),
        Entry("runtime", "Neuron Runtime errors", f"{_UG}:496; {_NMP}"),
        Entry("hardware", "hardware errors such as uncorrectable ECC issues", f"{_UG}:497; {_NMP}"),
    ),
)
#: The error types the guide calls recoverable: the only ones an alert on failures leaves out.
RECOVERABLE_ERROR_TYPES = frozenset({"transient"})

#: ``instance_info``: "always present" (L248-249), fields from the instance metadata service
#: (L259-279); "error will contain an error string if getting one of the fields ... resulted in an
#: error" (L281-282). On nodes with IMDSv2 and a hop limit of 1 a pod without host networking gets no
#: token, so these are empty strings with ``error`` set. The exporter reads the keys with ``[]`` and
#: never reads ``error`` (get_instance_labels), so it keeps exporting, with these labels empty:
#: nothing of the platform may select or group by them.
INSTANCE_LABELS = Contract(
    consumer="neuron-monitor-prometheus.py get_instance_labels (labels of every neuron-monitor series)",
    version="neuron-monitor 1.3.0",
    entries=tuple(
        Entry(
            label,
            "filled from instance_info, itself from IMDS: empty on a node whose hop limit keeps pods from IMDS",
            f"{_UG}:248-282; neuron-monitor-prometheus.py get_instance_labels",
        )
        for label in (
            "instance_name",
            "instance_id",
            "instance_type",
            "availability_zone",
            "region",
            "subnet_id",
        )
    ),
)
#: Neuron's own DaemonSet sets no ``hostNetwork`` (src/k8/k8s-neuron-monitor-daemonset.yml L1-64, at
#: v2.32.0; neuron-helm-charts' monitor-exporter-daemonset.yaml at 5c70d9d4 neither): the instance
#: labels are empty there too, and the platform does not give this privileged pod the node's IMDS.
NEURON_DAEMONSET_HOST_NETWORK = False
