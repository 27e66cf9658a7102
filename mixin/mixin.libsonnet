// The localtraffic-exporter monitoring mixin: alerts, recording rules and the Grafana dashboard, in the
// monitoring-mixins layout (prometheusAlerts, prometheusRules, grafanaDashboards, _config).
//
// The rules and the dashboard are not written here: alerts/cmd/generate renders alerts/alerts.yaml,
// alerts/rules.yaml and the dashboard built from Go (alerts/dashgen) into generated/, and alerts/mixin_test.go
// renders this file with go-jsonnet and checks that, with the default _config, it equals those sources.
local defaults = import 'config.libsonnet';

// withSelector puts the configured exporter selector and DaemonSet name in place of the default ones in a PromQL
// expression.
local ownerSelector(name) = 'created_by_name="%s"' % name;
local withSelector(expr, config) =
  std.strReplace(
    std.strReplace(expr, defaults._config.localtrafficExporterSelector, config.localtrafficExporterSelector),
    ownerSelector(defaults._config.localtrafficDaemonSetName),
    ownerSelector(config.localtrafficDaemonSetName)
  );

// withClusterLabel puts the configured cluster label in place of `cluster` where the rules name it: grouping
// and matching clauses, $labels.cluster in templates, and the matcher the per-Service alert's description builds.
local withClusterLabel(s, config) =
  local l = config.clusterLabel;
  if l == 'cluster' then s else
    std.foldl(
      function(acc, p) std.strReplace(acc, p[0], p[1]),
      [['(cluster, ', '(' + l + ', '], ['(cluster)', '(' + l + ')'], ['$labels.cluster', '$labels.' + l], [',cluster=%q', ',' + l + '=%q']],
      s
    );

local rewrite(s, config) = withClusterLabel(withSelector(s, config), config);

// The selector and the cluster label are rewritten in the expressions and in the annotations that quote them;
// an alert's runbook_url follows runbookURLPattern.
local rewriteRule(r, config) =
  r { expr: rewrite(r.expr, config) }
  + (if std.objectHas(r, 'annotations') then {
       annotations: { [k]: rewrite(r.annotations[k], config) for k in std.objectFields(r.annotations) }
                    + (if std.objectHas(r, 'alert') && std.objectHas(r.annotations, 'runbook_url') then {
                         runbook_url: config.runbookURLPattern % std.asciiLower(r.alert),
                       } else {}),
     } else {});

// The Alertmanager route and inhibit rule (alerts/alertmanager.yaml): grouping and equality by the cluster label.
local amLabels(ls, config) = [if l == 'cluster' then config.clusterLabel else l for l in ls];
local rewriteRoute(r, config) =
  r
  + (if std.objectHas(r, 'group_by') then { group_by: amLabels(r.group_by, config) } else {})
  + (if std.objectHas(r, 'routes') then { routes: [rewriteRoute(c, config) for c in r.routes] } else {});
local alertmanagerConfig(config) =
  local am = import 'generated/alertmanager.json';
  am {
    route: rewriteRoute(am.route, config),
    inhibit_rules: [i { equal: amLabels(i.equal, config) } for i in am.inhibit_rules],
  };

local rewriteRules(groups, config) = {
  groups: [
    g { rules: [rewriteRule(r, config) for r in g.rules] }
    for g in groups.groups
  ],
};

local rewritePanel(p, config) =
  p + (if std.objectHas(p, 'targets') then { targets: [t { expr: withSelector(t.expr, config) } for t in p.targets] } else {})
  + (if std.objectHas(p, 'panels') then { panels: [rewritePanel(q, config) for q in p.panels] } else {});

// The alert groups split by where they can be evaluated: on every shard, or only where all nodes are seen.
local alertGroups(config, crossNode) = {
  groups: [
    g
    for g in rewriteRules(import 'generated/prometheus_alerts.json', config).groups
    if std.member(config.crossNodeAlertGroups, g.name) == crossNode
  ],
};

defaults {
  // Unsharded: every group, as alerts/alerts.yaml has them. Sharded: the groups every shard may evaluate.
  prometheusAlerts+::
    if $._config.shardedPrometheus then alertGroups($._config, false)
    else rewriteRules(import 'generated/prometheus_alerts.json', $._config),
  // Sharded: the cross-node groups, for a global ruler over the shards (they read the recording rules of
  // prometheusRules, which every shard evaluates). Unsharded: nothing, prometheusAlerts has them.
  prometheusGlobalAlerts+:: if $._config.shardedPrometheus then alertGroups($._config, true) else { groups: [] },
  prometheusRules+:: rewriteRules(import 'generated/prometheus_rules.json', $._config),
  // Not a monitoring-mixins field: the Alertmanager route (one notification per Service and alert) and the inhibit
  // rule that lets LocalTrafficServiceBlackhole stand for the per-node pages, for your Alertmanager configuration
  // (merge route.routes and inhibit_rules; the receivers are placeholders to rename).
  alertmanagerConfig+:: alertmanagerConfig($._config),

  grafanaDashboards+:: {
    local d = import 'generated/dashboards/localtraffic-exporter.json',
    'localtraffic-exporter.json': d {
      uid: $._config.grafanaDashboardUid,
      tags: $._config.grafanaDashboardTags,
      panels: [rewritePanel(p, $._config) for p in d.panels],
    },
  },
}
