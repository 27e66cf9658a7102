// Package endpoint is where the exporter serves its metrics unless told otherwise: the defaults of its
// --web.listen-address and --web.telemetry-path, which the kubectl plugin assumes for a DaemonSet whose
// exporter container sets neither. One definition, so the two binaries cannot drift apart.
package endpoint

const (
	// DefaultListenAddress is the exporter's default listen address: every address, port 9746.
	DefaultListenAddress = ":9746"
	// DefaultPath is the exporter's default metrics path.
	DefaultPath = "/metrics"
)
