package cli

import (
	"fmt"
	"strings"
)

// The exit statuses. What each means for each command is exitStatuses' table, the one the commands' help prints
// and docs/audit.md's "Exit status" table repeats word for word (TestExitStatusTableIsTheDocs).
const (
	ExitClean    = 0
	ExitFindings = 1
	ExitError    = 2
	ExitAPI      = 3
)

// exitStatus is one exit status and what it means for each command.
type exitStatus struct {
	code                      int
	status, drainCheck, audit string
}

// exitStatuses is the table of exit statuses, in order. A script (a CI gate, a drain automation) branches on
// them, so each says what the caller does next.
func exitStatuses() []exitStatus {
	return []exitStatus{
		{ExitClean,
			"no judged node drops a Local Service's traffic, by the API or by its exporter (--from-exporters, --prometheus); an ignored Service's drops aside",
			"draining NODE leaves every Local Service with an endpoint there served (the connections a load balancer still sends to NODE before its health check takes it out aside: the last line says how long), and no exporter reports one of them blackholed now (--prometheus, --from-exporters)",
			"no finding at or above --fail-on (default warning); an ignored Service's findings aside"},
		{ExitFindings,
			"a judged node receives a Local Service's traffic and drops it, by the API or by its exporter (--from-exporters, --prometheus), or nobody announces a load balancer IP of a Service with endpoints",
			"the drain would lose a Service's traffic (each Service and why), or an exporter reports one of these Services blackholed now (--prometheus, --from-exporters)",
			"a finding at or above --fail-on"},
		{ExitError,
			"bad input (an unknown flag, command or output format, a --node that is not there, no such SERVICE, --prometheus-* flags that cannot work, --drain-lookback without --prometheus, no exporter DaemonSet where --from-exporters looks): fix the flags; one line on stderr",
			"bad input (an unknown flag or output format, no such NODE, --prometheus-* flags that cannot work, --drain-lookback without --prometheus, --from-exporters with --prometheus, no exporter DaemonSet where --from-exporters looks): fix the flags; one line on stderr",
			"bad input (an unknown flag or output format, an unreadable file, invalid YAML, a known kind that does not decode): fix the flags or files; one line on stderr"},
		{ExitAPI,
			"a read failed and nothing above made it 1: the API server (a list), an exporter (--from-exporters), or Prometheus (--prometheus: an error of its verdicts' or its measured drain's query, no answer within --prometheus-timeout, or no report from a judged node); one line on stderr names what",
			"a read failed and nothing above made it 1: the API server, an exporter (--from-exporters), or Prometheus (--prometheus) as for status; one line on stderr names what",
			"the API server failed or refused a read (live mode): fix the access or retry"},
	}
}

// of is the status's meaning for command: status, drain-check or audit.
func (e exitStatus) of(command string) string {
	switch command {
	case "status":
		return e.status
	case "drain-check":
		return e.drainCheck
	case "audit":
		return e.audit
	}
	return ""
}

// ExitHelp is the "Exit status" part of command's help.
func ExitHelp(command string) string {
	var b strings.Builder
	b.WriteString("\n\nExit status:")
	for _, e := range exitStatuses() {
		fmt.Fprintf(&b, "\n  %d  %s", e.code, e.of(command))
	}
	return b.String()
}
