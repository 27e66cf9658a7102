// Package alerts holds the tooling around the Prometheus rules in this directory and the Grafana dashboards in
// ../dashboards: it renders the prometheus-operator artefacts in ../deploy/prometheus-operator (a
// PrometheusRule and a dashboard ConfigMap, see cmd/generate), and its tests check that those artefacts do not
// drift, that every rule and dashboard query names only metrics the exporter exports, and by default (package
// metricset, generated from the exporter's code), that every alert follows the house style and has a runbook
// entry, and that promtool accepts and passes the rules and their unit tests.
//
// It is a module of its own so that the exporter's module does not depend on Prometheus' server code
// (github.com/prometheus/prometheus) just for PromQL parsing.
package alerts
