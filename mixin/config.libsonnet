// Settings of the localtraffic-exporter mixin. Override them when you import it:
//
//   (import 'localtraffic-exporter-mixin/mixin.libsonnet') + {
//     _config+:: { localtrafficExporterSelector: 'job="kube-system/localtraffic-exporter"' },
//   }
{
  _config+:: {
    // Selects the exporter's own scrape targets (up, absent). The default is the job name of the shipped
    // scrape configuration, PodMonitor and ServiceMonitor. Only the exporter-liveness alerts and the
    // dashboard's "Exporters up" panel use it: every other query selects on metric names only, which no other
    // exporter uses.
    localtrafficExporterSelector: 'job="localtraffic-exporter"',

    // Tags and uid of the Grafana dashboard.
    grafanaDashboardTags: ['kubernetes', 'kube-proxy', 'localtraffic-exporter'],
    grafanaDashboardUid: 'localtraffic-exporter',
  },
}
