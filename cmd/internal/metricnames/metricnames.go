// Package metricnames is the exporter's metric names and each metric's label names as constants, for the kubectl
// plugin, which reads an exporter's series but may not import the collector (it builds for Linux only and brings
// the exporter's dependencies). The collector's docs test generates metricnames_gen.go from the code, beside
// docs/metrics.md's table, and fails while it is stale; a label constant exists only for a label its metric has,
// so a reader of a label the exporter dropped stops compiling.
package metricnames
