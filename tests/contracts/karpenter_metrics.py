"""Karpenter's controller metrics, as the platform's Prometheus scrapes them and its capacity alert
reads them; the EC2 error codes behind the insufficient-capacity count; the chart's ServiceMonitor.

Version: Karpenter 1.14.1, read at tag v1.14.1 of both repositories:

* kubernetes-sigs/karpenter (6e7eab7a): the core controllers, which own the NodeClaim metrics.
  The AWS provider builds against exactly that commit (aws/karpenter-provider-aws v1.14.1 go.mod
  L49: ``sigs.k8s.io/karpenter v1.14.1-0.20260819221709-6e7eab7a0f48``);
* aws/karpenter-provider-aws (bde00654): the EC2 errors it reports to the core as insufficient
  capacity, and ``charts/karpenter`` (its Chart.yaml at the tag still reads 1.13.0, L5-6: the
  release script sets both versions when it packages the chart, hack/release/common.sh L100-101).

A metric's exported name is ``<namespace>_<subsystem>_<name>`` (client_golang's ``BuildFQName``):
the parts are cited where each is declared. The series exists only once incremented (the counters
are vectors with no initial label values): a first failure makes a new series whose first sample
is already 1.
"""

from __future__ import annotations

from tests.contracts.model import Contract, Entry

VERSION = "1.14.1"
_CORE = f"kubernetes-sigs/karpenter@v{VERSION}"
_AWS = f"aws/karpenter-provider-aws@v{VERSION}"
_CHART = f"{_AWS}:charts/karpenter"
_LAUNCH = f"{_CORE}:pkg/controllers/nodeclaim/lifecycle/launch.go"
_METRICS = f"{_CORE}:pkg/metrics/metrics.go"
_CONSTANTS = f"{_CORE}:pkg/metrics/constants.go"
_ERRORS = f"{_AWS}:pkg/errors/errors.go"
_INSTANCE = f"{_AWS}:pkg/providers/instance/instance.go"

#: ``Namespace`` of every Karpenter metric (constants.go L27).
METRIC_NAMESPACE = "karpenter"
#: ``NodeClaimsDisruptedTotal``: namespace ``karpenter``, subsystem ``nodeclaims`` (metrics.go
#: L27), name ``disrupted_total`` (L61-74); listed under this name in the provider's metrics
#: reference (website/content/en/docs/reference/metrics.md L33-35, Stability Level ALPHA).
NODECLAIMS_DISRUPTED_TOTAL = f"{METRIC_NAMESPACE}_nodeclaims_disrupted_total"

#: Labels of :data:`NODECLAIMS_DISRUPTED_TOTAL` (metrics.go L69-73, names from constants.go L29-32).
NODECLAIMS_DISRUPTED_LABELS = Contract(
    consumer=f"{NODECLAIMS_DISRUPTED_TOTAL} (kubernetes-sigs/karpenter pkg/metrics)",
    version=VERSION,
    entries=(
        Entry(
            "reason",
            "why the NodeClaim went: one of DISRUPTION_REASONS",
            f"{_METRICS}:70; {_CONSTANTS}:30",
        ),
        Entry(
            "nodepool",
            "the NodeClaim's karpenter.sh/nodepool label: the NodePool's name",
            f"{_METRICS}:71; {_CONSTANTS}:29; {_LAUNCH}:94",
        ),
        Entry(
            "capacity_type",
            "the NodeClaim's karpenter.sh/capacity-type label (on-demand, spot, reserved)",
            f"{_METRICS}:72; {_CONSTANTS}:32; {_LAUNCH}:95",
        ),
    ),
)

#: Values of the ``reason`` label: every ``NodeClaimsDisruptedTotal.Inc`` call of the tag.
DISRUPTION_REASONS = Contract(
    consumer=f"{NODECLAIMS_DISRUPTED_TOTAL}{{reason}}",
    version=VERSION,
    entries=(
        Entry(
            "insufficient_capacity",
            "the cloud provider's Create returned an InsufficientCapacityError: Karpenter publishes an "
            "InsufficientCapacityError event on the NodeClaim, logs 'failed launching nodeclaim', deletes "
            "the NodeClaim and counts it",
            f"{_LAUNCH}:85-97; {_CORE}:pkg/controllers/nodeclaim/lifecycle/events.go:28-35",
        ),
        Entry(
            "nodeclass_not_ready",
            "the EC2NodeClass is not Ready: the NodeClaim is deleted and counted",
            f"{_LAUNCH}:98-108",
        ),
        *(
            Entry(
                reason,
                "a voluntary disruption (the snake case of the NodePool's DisruptionReason)",
                f"{_CORE}:pkg/controllers/disruption/queue.go:242-246; {_CORE}:pkg/apis/v1/nodepool.go:{line}",
            )
            for reason, line in (("underutilized", 183), ("empty", 184), ("drifted", 185))
        ),
        Entry(
            "expired",
            "the NodeClaim reached its NodePool's expireAfter",
            f"{_CORE}:pkg/controllers/nodeclaim/expiration/controller.go:86-90; {_CONSTANTS}:38",
        ),
        Entry(
            "garbage_collected",
            "the NodeClaim had no instance behind it any more",
            f"{_CORE}:pkg/controllers/nodeclaim/garbagecollection/controller.go:112-116",
        ),
        Entry(
            "unhealthy",
            "node repair deleted a node whose condition stayed unhealthy",
            f"{_CORE}:pkg/controllers/node/health/controller.go:174-178; {_CONSTANTS}:39",
        ),
        *(
            Entry(
                reason,
                "the NodeClaim timed out launching or registering (liveness)",
                f"{_CORE}:pkg/controllers/nodeclaim/lifecycle/liveness.go:{line},153-157",
            )
            for reason, line in (("registration_timeout", 53), ("launch_timeout", 54))
        ),
    ),
)
#: The one reason that means "no capacity for this launch".
INSUFFICIENT_CAPACITY_REASON = "insufficient_capacity"
#: Reason of the Warning event published on the NodeClaim at the same failure, with the error's
#: text (the CreateFleet codes) in its message (pkg/events/reason.go L50; events.go L28-35). The
#: NodeClaim is cluster-scoped and deleted right after: the event outlives it.
INSUFFICIENT_CAPACITY_EVENT_REASON = "InsufficientCapacityError"

#: ``karpenter_build_info``: a gauge set to 1 in the operator package's ``init`` (so in every
#: replica, leader or not, from its start), labelled by version (pkg/operator/operator.go L70-95).
BUILD_INFO = f"{METRIC_NAMESPACE}_build_info"

#: CreateFleet error codes the AWS provider treats as insufficient capacity. When every error of a
#: failed CreateFleet is one of these, the error becomes an InsufficientCapacityError
#: (``combineFleetErrors``, instance.go L799-816, called at L422-433), which the core counts as
#: ``insufficient_capacity``; a mix with any other code is a plain CreateError and is not counted.
#: The same provider also answers InsufficientCapacityError, without calling EC2, when a filter
#: leaves no offering to launch (instance.go L320-334; an offering still marked unavailable after
#: an earlier failure is one) or when the EC2NodeClass is missing (pkg/cloudprovider/cloudprovider.go
#: L106-112).
INSUFFICIENT_CAPACITY_CODES = Contract(
    consumer="aws/karpenter-provider-aws unfulfillableCapacityErrorCodes (IsUnfulfillableCapacity)",
    version=VERSION,
    entries=(
        *(
            Entry(code, use, f"{_ERRORS}:{line}; {_INSTANCE}:807-813")
            for code, use, line in (
                ("InsufficientInstanceCapacity", "EC2 has no capacity of the type in the zone now", "57"),
                ("MaxSpotInstanceCountExceeded", "the account's Spot instance quota is reached", "58"),
                (
                    "VcpuLimitExceeded",
                    "the account's On-Demand vCPU quota of the instance family is reached (for Trn types: "
                    "'Running On-Demand Trn instances')",
                    "59",
                ),
                ("UnfulfillableCapacity", "EC2 cannot fulfil the fleet request", "60"),
                ("Unsupported", "the type is not offered in the zone (or not with these options)", "61"),
                ("InsufficientFreeAddressesInSubnet", "the subnet has no free IP address", "33,62"),
                ("MaxFleetCountExceeded", "the account's fleet quota is reached", "34,63"),
                ("ReservationCapacityExceeded", "the capacity reservation has no instance free", "53,64"),
            )
        ),
        Entry(
            "AuthFailure.ServiceLinkedRoleCreationNotPermitted",
            "the Spot service-linked role cannot be created: counted with the capacity errors",
            f"{_ERRORS}:32,179-181; {_INSTANCE}:807-813",
        ),
    ),
)
#: Codes that mean an account quota, not EC2's capacity (``ToReasonMessage``, errors.go L280-291).
QUOTA_CODES = frozenset({"VcpuLimitExceeded", "MaxSpotInstanceCountExceeded", "MaxFleetCountExceeded"})
#: Seconds an on-demand or Spot offering that failed for capacity stays marked unavailable
#: (pkg/cache/cache.go L29-31, marked at instance.go L610-643): while pods still wait, Karpenter
#: tries it again once this has passed, and counts again if it fails again.
UNAVAILABLE_OFFERING_TTL_S = 180

#: Gauges with one series per instance type of the region (or per type, capacity type and zone):
#: the AWS provider lists every type EC2 describes, not only those the NodePool allows
#: (pkg/cloudprovider/cloudprovider.go L207-223; instancetype.go L166-172, L231-236;
#: pkg/controllers/metrics/controller.go L59-97). Nothing of the platform reads them.
INSTANCE_TYPE_GAUGES = Contract(
    consumer="aws/karpenter-provider-aws instance-type gauges",
    version=VERSION,
    entries=(
        Entry(
            f"{METRIC_NAMESPACE}_cloudprovider_instance_type_offering_available",
            "1/0 per instance type, capacity type and zone",
            f"{_AWS}:pkg/controllers/metrics/metrics.go:25-45",
        ),
        Entry(
            f"{METRIC_NAMESPACE}_cloudprovider_instance_type_offering_price_estimate",
            "hourly price per instance type, capacity type and zone",
            f"{_AWS}:pkg/controllers/metrics/metrics.go:25,46-59",
        ),
        Entry(
            f"{METRIC_NAMESPACE}_cloudprovider_instance_type_cpu_cores",
            "vCPUs per instance type",
            f"{_AWS}:pkg/providers/instancetype/metrics.go:26,31-42",
        ),
        Entry(
            f"{METRIC_NAMESPACE}_cloudprovider_instance_type_memory_bytes",
            "memory per instance type",
            f"{_AWS}:pkg/providers/instancetype/metrics.go:26,43-54",
        ),
    ),
)

#: The chart's ServiceMonitor values (values.yaml at the tag; templates/servicemonitor.yaml).
CHART_SERVICE_MONITOR = Contract(
    consumer="karpenter chart (charts/karpenter) ServiceMonitor",
    version=VERSION,
    entries=(
        Entry(
            "serviceMonitor.enabled",
            "renders the ServiceMonitor (default false), and only if the cluster serves "
            "monitoring.coreos.com/v1 when the chart is installed (.Capabilities.APIVersions.Has)",
            f"{_CHART}/values.yaml:30; templates/servicemonitor.yaml:1",
        ),
        Entry(
            "serviceMonitor.additionalLabels",
            "labels added to the ServiceMonitor's own (the chart's common labels)",
            f"{_CHART}/values.yaml:32; templates/servicemonitor.yaml:7-11",
            kind="map",
        ),
        Entry(
            "serviceMonitor.relabelings",
            "relabelings of the http-metrics endpoint",
            f"{_CHART}/values.yaml:35; templates/servicemonitor.yaml:29-32",
            kind="list",
        ),
        Entry(
            "serviceMonitor.metricRelabelings",
            "metric relabelings of the http-metrics endpoint (applied to scraped series)",
            f"{_CHART}/values.yaml:38; templates/servicemonitor.yaml:33-36",
            kind="list",
        ),
        Entry(
            "serviceMonitor.endpointConfig",
            "more fields of the endpoint (interval, scheme...)",
            f"{_CHART}/values.yaml:42; templates/servicemonitor.yaml:37-39",
            kind="map",
        ),
        Entry(
            "serviceMonitor.sampleLimit",
            "the scrape's sample limit (default null: none)",
            f"{_CHART}/values.yaml:47; templates/servicemonitor.yaml:23-25",
        ),
        Entry(
            "controller.metrics.port",
            "the container's METRICS_PORT and the Service's port (default 8080)",
            f"{_CHART}/values.yaml:167; templates/deployment.yaml:108-109,208-209; templates/service.yaml:20-23",
        ),
    ),
)
#: The ServiceMonitor is rendered only where the cluster serves this API at install time.
SERVICE_MONITOR_API = "monitoring.coreos.com/v1"
#: The Service's (and the ServiceMonitor's endpoint's) port name and the path scraped
#: (templates/service.yaml L19-23; templates/servicemonitor.yaml L26-28).
METRICS_PORT_NAME = "http-metrics"
METRICS_PATH = "/metrics"
#: The ServiceMonitor lives in the release's namespace (``kube-system`` here) and selects the
#: chart's Service there by its selector labels (templates/servicemonitor.yaml L4-6, L16-22;
#: _helpers.tpl L51-54): nothing to set for the target.

#: kube-prometheus-stack's Prometheus, with ``serviceMonitorSelectorNilUsesHelmValues`` at its
#: default (true) and no ``serviceMonitorSelector``, selects ServiceMonitors labelled
#: ``release: <its Helm release>``, and with no ``serviceMonitorNamespaceSelector`` those of every
#: namespace (prometheus-community/helm-charts charts/kube-prometheus-stack
#: templates/prometheus/prometheus.yaml, the ``serviceMonitorSelector`` block next to the
#: ``podMonitorSelector`` and ``ruleSelector`` ones; read at 0027117e).
PROMETHEUS_SERVICE_MONITOR_SELECTOR_KEY = "release"
PROMETHEUS_SELECTOR_VALUES = (
    "prometheus.prometheusSpec.serviceMonitorSelector",
    "prometheus.prometheusSpec.serviceMonitorSelectorNilUsesHelmValues",
    "prometheus.prometheusSpec.serviceMonitorNamespaceSelector",
)
#: Karpenter's own series carry a ``node`` label (the pods metrics, pkg/controllers/metrics/pod/
#: controller.go L50): a relabeling of the target's node into ``node`` would rename theirs to
#: ``exported_node``.
OWN_NODE_LABEL = "node"
