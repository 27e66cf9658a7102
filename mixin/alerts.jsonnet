// jsonnet -J vendor alerts.jsonnet > prometheus_alerts.json (or render as YAML with -S and std.manifestYamlDoc).
(import 'mixin.libsonnet').prometheusAlerts
