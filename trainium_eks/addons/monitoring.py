"""Metrics, dashboard and alerts: kube-prometheus-stack with the platform's own scrapes and rules.

On by default (``monitoring_enabled``), all on the system nodes but the node daemons, with no
public endpoint (Grafana and Prometheus are ClusterIP Services: ``kubectl port-forward``). What
it installs, each part in its module of :mod:`trainium_eks.monitoring`:

* the ``monitoring`` namespace (Pod Security ``privileged``: node-exporter and neuron-monitor
  need the host), then the pinned kube-prometheus-stack chart (:mod:`~trainium_eks.monitoring.stack_values`:
  Prometheus on a gp3 volume with time and size retention, Grafana with a generated admin
  password, node-exporter on every node, kube-state-metrics; Alertmanager optional);
* neuron-monitor on every Trainium node and its PodMonitor (:mod:`~trainium_eks.monitoring.neuron_monitor`);
* the training pods' PodMonitor and the NetworkPolicy that lets Prometheus reach them
  (:mod:`~trainium_eks.monitoring.scrape`), in the training namespace;
* the alert rules (:mod:`~trainium_eks.monitoring.rules`) and the Grafana dashboard
  (:mod:`~trainium_eks.monitoring.dashboard`); with ``karpenter_capacity``, the alert on Karpenter's
  failed launches, whose metrics Karpenter's own chart has scraped
  (:mod:`~trainium_eks.monitoring.karpenter_capacity`);
* optionally, remote write to Amazon Managed Service for Prometheus (:mod:`~trainium_eks.monitoring.amp`).

The EFA and FSx exporters run the workload's tools image and come with the workload
(:class:`~trainium_eks.monitoring.exporters.TrainingExporters`).
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from trainium_job.errors import ConfigError
from trainium_job.scheduling import SYSTEM_NODE_LABEL, TRAINING_NAMESPACE
from trainium_job.security import namespace_manifest, pod_security_labels

from ..arguments import AnyCluster, require_cluster
from ..cluster.helm import HELM_TIMEOUT
from ..monitoring import neuron_monitor, scrape
from ..monitoring.amp import AmpRemoteWrite
from ..monitoring.dashboard import dashboard_config_map
from ..monitoring.exporters import efa_exporter_daemonset
from ..monitoring.karpenter_capacity import KarpenterCapacity
from ..monitoring.names import NAMESPACE, PROMETHEUS_SERVICE_ACCOUNT, RELEASE, port_forward_commands
from ..monitoring.neuron_monitor import neuron_monitor_daemonset, neuron_monitor_pod_monitor
from ..monitoring.options import MonitoringOptions, check_monitoring_options
from ..monitoring.rules import prometheus_rule
from ..monitoring.stack_values import stack_values
from ..versions import AddonPin, ChartEvidence, Declared
from .addon import POD_IDENTITY_AGENT, SYSTEM_NODES, AddOn, AddonContext
from .node_daemons import DaemonSettings, NodeDaemon, manifest_daemons, pinned_chart_daemons

#: node-exporter shares the host's network, PID namespace and root file system, neuron-monitor is
#: privileged: only the ``privileged`` level admits them ("Pod Security Standards", Baseline).
MONITORING_POD_SECURITY = pod_security_labels("privileged", warn="baseline", audit="baseline")


_DECLARED = Declared(
    True,
    "prometheus-community/helm-charts@ea930bae:charts/kube-prometheus-stack/Chart.yaml "
    "(kube-prometheus-stack-88.5.3): kubeVersion '>=1.25.0-0'; its grafana 12.11.1 subchart "
    "declares '^1.25.0-0'",
)

# prometheus-community/helm-charts tag kube-prometheus-stack-88.5.3 (ea930bae, 2026-08-21), the
# newest in the snapshot read: Chart.yaml version 88.5.3, appVersion v0.93.1 (the operator),
# kubeVersion ">=1.25.0-0"; it bundles Prometheus v3.14.0, Alertmanager v0.34.0, Grafana
# 13.2.0 (grafana chart 12.11.1), node-exporter v1.12.1 (chart 4.56.1) and kube-state-metrics
# v2.20.0 (chart 8.4.0). The index's digest could not be read offline.
#: The kube-prometheus-stack Helm chart.
CHART = AddonPin(
    "kube-prometheus-stack",
    "88.5.3",
    "https://prometheus-community.github.io/helm-charts",
    ChartEvidence(
        version="88.5.3",
        created="2026-08-21 (commit date of the release tag kube-prometheus-stack-88.5.3)",
        # The repository's gh-pages index.yaml is larger than the stored copies keep, so the
        # chart archive's digest could not be read; the release tag's Chart.yaml is the evidence.
        digest=None,
        app_version="v0.93.1",
        index="prometheus-community/helm-charts@ea930bae:charts/kube-prometheus-stack/Chart.yaml "
        "(release tag kube-prometheus-stack-88.5.3)",
    ),
    compatibility=dict.fromkeys(("1.34", "1.35", "1.36"), _DECLARED),
)


class PlatformMonitoring(Construct):
    """kube-prometheus-stack with neuron-monitor, the training scrape, alerts and the dashboard.

    Attributes:
        namespace_manifest: the ``monitoring`` namespace.
        chart: the ``aws_eks_v2.HelmChart`` (release ``kube-prometheus-stack``).
        manifest: rules, dashboard, neuron-monitor and the PodMonitors (after the chart's CRDs).
        training_manifest: the NetworkPolicy in the training namespace (order it after that
            namespace exists).
        amp: the :class:`AmpRemoteWrite`, or None.
        port_forward: ``kubectl port-forward`` commands by service (``grafana``, ``prometheus``).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: AnyCluster,
        storage_class_name: str,
        options: MonitoringOptions | None = None,
        training_namespace: str = TRAINING_NAMESPACE,
        amp_alias: str = "trainium-eks",
        pin: AddonPin = CHART,
        karpenter_capacity: KarpenterCapacity | None = None,
        node_selector: Mapping[str, str] = SYSTEM_NODE_LABEL,
    ) -> None:
        """
        Args:
            cluster: the cluster (with a kubectl provider).
            storage_class_name: StorageClass of Prometheus's volume (an EBS CSI gp3 class).
            options: what to install (:class:`MonitoringOptions`). Default None: its defaults.
            training_namespace: where the training pods run. Default ``TRAINING_NAMESPACE``.
            amp_alias: alias of the AMP workspace, with ``amp_remote_write``. Default "trainium-eks".
            pin: the chart. Default: :data:`CHART`.
            karpenter_capacity: with ``trainium_capacity=karpenter``, the NodePool, instance type
                and AZ ID Karpenter launches: adds the TrainiumCapacityMissing alert (Karpenter's
                chart must then scrape itself: ``karpenter_chart_monitoring_values``). Default None.
            node_selector: the labels of the system nodes its pods run on (all but the node
                daemons). Default ``SYSTEM_NODE_LABEL`` (the system nodegroup :class:`TrainiumCluster` makes).
        """
        super().__init__(scope, id)
        cluster = require_cluster(cluster)
        options = options or MonitoringOptions()
        check_monitoring_options(options)
        if not storage_class_name:
            raise ConfigError(
                "storage_class_name", storage_class_name, "name the EBS StorageClass of the volume"
            )
        self.namespace_manifest = eks.KubernetesManifest(
            self,
            "Namespace",
            cluster=cluster,
            manifest=[namespace_manifest(NAMESPACE, MONITORING_POD_SECURITY)],
        )
        self.amp = self._amp(cluster, options, amp_alias)
        self.chart = self._chart(cluster, pin, options, storage_class_name, node_selector)
        self.manifest = eks.KubernetesManifest(
            self,
            "Manifest",
            cluster=cluster,
            manifest=_manifest_objects(options, training_namespace, karpenter_capacity),
        )
        self.manifest.node.add_dependency(self.chart)
        self.training_manifest = eks.KubernetesManifest(
            self,
            "TrainingIngress",
            cluster=cluster,
            manifest=[scrape.training_ingress_policy(training_namespace)],
        )
        self.port_forward = port_forward_commands()

    def _amp(self, cluster: eks.ICluster, options: MonitoringOptions, alias: str) -> AmpRemoteWrite | None:
        """The AMP workspace Prometheus writes to, with ``amp_remote_write``."""
        if not options.amp_remote_write:
            return None
        return AmpRemoteWrite(
            self,
            "Amp",
            cluster=cluster,
            namespace=NAMESPACE,
            service_account=PROMETHEUS_SERVICE_ACCOUNT,
            alias=alias,
        )

    def _chart(
        self,
        cluster: eks.ICluster,
        pin: AddonPin,
        options: MonitoringOptions,
        storage_class_name: str,
        node_selector: Mapping[str, str],
    ) -> eks.HelmChart:
        """The kube-prometheus-stack release, after its namespace (and AMP's association)."""
        chart = eks.HelmChart(
            self,
            "Chart",
            cluster=cluster,
            **pin.chart_props(),
            release=RELEASE,
            namespace=NAMESPACE,
            create_namespace=False,
            values=stack_values(
                storage_class_name=storage_class_name,
                volume_gib=options.volume_gib,
                retention_days=options.retention_days,
                grafana=options.grafana,
                alertmanager=options.alertmanager,
                remote_write=self.amp.remote_write() if self.amp else None,
                node_selector=node_selector,
            ),
            # The CRDs and the operator's admission webhook must be serving before the rules and
            # PodMonitors below are applied (the webhook validates PrometheusRules).
            wait=True,
            timeout=HELM_TIMEOUT,
        )
        chart.node.add_dependency(self.namespace_manifest)
        if self.amp is not None:
            chart.node.add_dependency(self.amp.association)
        return chart


def _manifest_objects(
    options: MonitoringOptions, training_namespace: str, karpenter_capacity: KarpenterCapacity | None
) -> list[dict]:
    """Rules, the training scrape, the dashboard and neuron-monitor, as the options say."""
    objects = [
        prometheus_rule(
            training_namespace=training_namespace,
            stall_minutes=options.stall_minutes,
            fsx_free_percent=options.fsx_free_percent,
            karpenter_capacity=karpenter_capacity,
        ),
        scrape.training_pod_monitor(training_namespace),
    ]
    if options.grafana:
        objects.append(dashboard_config_map())
    if options.neuron_monitor:
        objects += [neuron_monitor_daemonset(), neuron_monitor_pod_monitor()]
    return objects


def _build(context: AddonContext) -> PlatformMonitoring:
    return PlatformMonitoring(
        context.scope,
        "Monitoring",
        cluster=context.cluster,
        storage_class_name=context.built["ebs_csi"].storage_class_name,
        options=context.monitoring,
        amp_alias=f"{context.name_prefix}-metrics",
        karpenter_capacity=context.karpenter_capacity,
        node_selector=context.system_node_selector,
    )


def _daemons(settings: DaemonSettings) -> list[NodeDaemon]:
    if not settings.monitoring_enabled:
        return []
    facts = settings.facts
    # Only node-exporter's part of the values decides its DaemonSet; the volume and retention
    # given here are placeholders of the Prometheus StatefulSet's settings.
    values = stack_values(storage_class_name="gp3", volume_gib=1, retention_days=1)
    daemons = pinned_chart_daemons(CHART, values, facts.name)
    if settings.monitoring_neuron_monitor:
        daemons += manifest_daemons([neuron_monitor_daemonset()], facts.name)
    if settings.training_enabled and settings.monitoring_exporters and facts.multi_node:
        # The image is the workload's token; it does not decide where the pod runs or its requests.
        daemonset = efa_exporter_daemonset(namespace=TRAINING_NAMESPACE, image="tools", facts=facts)
        daemons += manifest_daemons([daemonset], facts.name)
    return daemons


#: Its pods run on the system nodes, its volume comes from the driver, AMP's credentials from the
#: pod identity agent.
ADDON = AddOn(
    name="monitoring",
    key="monitoring_enabled",
    pins={"kube-prometheus-stack": CHART, "neuron-monitor": neuron_monitor.IMAGE},
    after=(SYSTEM_NODES, "ebs_csi", POD_IDENTITY_AGENT),
    build=_build,
    dependents=lambda monitoring: (monitoring.chart,),
    daemons=_daemons,
)
