// Package cli is what the plugin's verbs share: the invocation (Env: streams, environment, clients), the flags
// every verb takes and the root command that composes the verbs (Execute), the exit statuses and the errors that
// choose them, and the printers' common flags, documents and colours.
package cli

import (
	"fmt"
	"strings"
)

// BadInput is an error in what the user gave us (a file, its YAML, a flag): exit status 2.
type BadInput struct{ Err error }

func (b BadInput) Error() string { return b.Err.Error() }
func (b BadInput) Unwrap() error { return b.Err }

// BadInputf is a BadInput of fmt.Errorf(format, a...).
func BadInputf(format string, a ...any) error { return BadInput{fmt.Errorf(format, a...)} }

// APIError is a read the API server failed or refused (a list, a port-forward, an exporter behind it): exit
// status 3.
type APIError struct{ Err error }

func (e APIError) Error() string { return e.Err.Error() }
func (e APIError) Unwrap() error { return e.Err }

// OneLine is s with its runs of white space, line breaks among them, made one space: stderr says one line.
func OneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// NodeList names up to five nodes and counts the rest: one line even on a 5,000-node cluster.
func NodeList(nodes []string) string {
	const shown = 5
	if len(nodes) <= shown {
		return strings.Join(nodes, ", ")
	}
	return fmt.Sprintf("%s and %d more nodes", strings.Join(nodes[:shown], ", "), len(nodes)-shown)
}
