package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
)

// The verbs' documents, printed by cli-runtime's printers: -o json, yaml, jsonpath, go-template print a verb's
// document with its apiVersion and kind; -o name prints one line per Service.

// GroupVersion is the apiVersion of the JSON and YAML documents of status, audit and drain-check: a version of
// the documents' shapes that scripts can check, not an API the cluster serves.
var GroupVersion = schema.GroupVersion{Group: "localtraffic.io", Version: "v1alpha1"}

// TypeMeta is a document's apiVersion and kind.
func TypeMeta(kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: GroupVersion.String(), Kind: kind}
}

// DeepCopyJSON copies v through encoding/json: the documents are plain JSON (every field exported and tagged,
// Severity a text value), so a round trip is a deep copy, and cannot fail for them (TestDocumentsDeepCopy).
func DeepCopyJSON[T any](v *T) *T {
	b, err := json.Marshal(v)
	if err == nil {
		var c T
		if err = json.Unmarshal(b, &c); err == nil {
			return &c
		}
	}
	panic(fmt.Sprintf("deep copy of %T: %v", v, err))
}

// PrintFlags are a verb's output flags: cli-runtime's -o (json, yaml, name, jsonpath, go-template and their
// --template, --allow-missing-template-keys) and, for a table, --no-headers.
type PrintFlags struct {
	Print     *genericclioptions.PrintFlags
	NoHeaders bool
}

// NewPrintFlags are cli-runtime's print flags with no default format (text).
func NewPrintFlags() PrintFlags { return PrintFlags{Print: genericclioptions.NewPrintFlags("")} }

// Output is -o's value.
func (f PrintFlags) Output() string { return *f.Print.OutputFormat }

// Table: the output is the table (the default or wide), not a document.
func (f PrintFlags) Table() bool {
	switch f.Output() {
	case "", "text", "wide":
		return true
	}
	return false
}

// CheckFor tells a format command does not print apart before anything is read: text (the default) and own
// are the command's own formats, the rest cli-runtime's printers.
func (f PrintFlags) CheckFor(command string, own ...string) error {
	out := f.Output()
	if out == "" || out == "text" || slices.Contains(own, out) {
		return nil
	}
	if _, err := f.Print.ToPrinter(); err != nil {
		return BadInputf("unknown output format %q for %s: %s", out, command, strings.Join(f.Formats(own...), ", "))
	}
	return nil
}

// Formats lists the formats of a command whose own are own: text, own, then cli-runtime's.
func (f PrintFlags) Formats(own ...string) []string {
	return slices.Concat([]string{"text"}, own, f.Print.AllowedFormats())
}

// PrintDocument prints doc through cli-runtime's printer for -o (json, yaml, jsonpath, go-template), or for -o
// name each of items, as kubectl get -o name prints a list's items.
func PrintDocument(w io.Writer, flags PrintFlags, doc runtime.Object, items []runtime.Object) error {
	p, err := flags.Print.ToPrinter()
	if err != nil {
		return BadInput{err}
	}
	if flags.Output() == "name" {
		for _, it := range items {
			if err := p.PrintObj(it, w); err != nil {
				return fmt.Errorf("printing %s: %w", it.GetObjectKind().GroupVersionKind().Kind, err)
			}
		}
		return nil
	}
	if err := p.PrintObj(doc, w); err != nil {
		return fmt.Errorf("printing %s: %w", doc.GetObjectKind().GroupVersionKind().Kind, err)
	}
	return nil
}
