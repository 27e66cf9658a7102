// Settings of the localtraffic-exporter mixin. Override them when you import it:
//
//   (import 'localtraffic-exporter-mixin/mixin.libsonnet') + {
//     _config+:: { localtrafficExporterSelector: 'job="kube-system/localtraffic-exporter"' },
//   }
{
  _config+:: {
    // Selects the exporter's own scrape targets (up, absent). The default is the job name of the shipped
    // scrape configuration and of the chart's PodMonitor and ServiceMonitor. Only the exporter-liveness alerts, the
    // coverage alert's target recording and the dashboard's "Exporters up" panel use it: every other query selects
    // on metric names only, which no other exporter uses.
    localtrafficExporterSelector: 'job="localtraffic-exporter"',
    // The exporter DaemonSet's name: the coverage alert (LocalTrafficExporterNotScraped) finds its pods in
    // kube-state-metrics' kube_pod_info by it.
    localtrafficDaemonSetName: 'localtraffic-exporter',

    // Set when the exporters' targets are split across several Prometheus servers (hashmod sharding,
    // Prometheus Operator `shards:`), each evaluating the rules over its own part of the nodes. Per-node
    // alerts and every recording rule stay correct on each shard, but a cross-node alert (one Service's
    // endpoints on a single node) needs every node's series: with this set, prometheusAlerts holds only the
    // shard-safe groups, for the shards, and prometheusGlobalAlerts the cross-node group, for a ruler that
    // queries all shards (Thanos Ruler, Mimir or Cortex ruler). See docs/scale.md.
    shardedPrometheus: false,
    // The alert groups that need every node's series (alerts/alerts.yaml); not a setting to change.
    crossNodeAlertGroups: ['localtraffic-exporter-cross-node'],

    // Where each alert's runbook_url points: the pattern with the alert's name in lower case, as kubernetes-mixin's
    // runbookURLPattern ('https://runbooks.example.com/localtraffic/%s' for your own copies of docs/runbooks.md).
    runbookURLPattern: 'https://github.com/localtraffic/localtraffic-exporter/blob/main/docs/runbooks.md#%s',

    // The label that tells clusters apart on a Prometheus (or global ruler) that holds several, as
    // kubernetes-mixin's clusterLabel: the alerts and recording rules aggregate by it (absent in a
    // single-cluster Prometheus, where `by (cluster, ...)` yields no such label), the alert descriptions name
    // it, and alertmanagerConfig groups and inhibits by it. The dashboard's cluster variable keeps `cluster`.
    clusterLabel: 'cluster',

    // Tags and uid of the Grafana dashboard.
    grafanaDashboardTags: ['kubernetes', 'kube-proxy', 'localtraffic-exporter'],
    grafanaDashboardUid: 'localtraffic-exporter',
  },
}
