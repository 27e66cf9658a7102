package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/placement"
)

// audit's and drain-check's documents, printed by cli-runtime's printers as status's are: -o json, yaml,
// jsonpath, go-template print the report with its apiVersion and kind; -o name prints one line per Service.

// AuditReport is audit's JSON and YAML document.
type AuditReport struct {
	metav1.TypeMeta `json:",inline"`
	placement.Report
}

// ServiceAudit is one Service of an AuditReport, for -o name.
type ServiceAudit struct {
	metav1.TypeMeta `json:",inline"`
	placement.ServiceReport
}

// DrainReport is drain-check's JSON and YAML document.
type DrainReport struct {
	metav1.TypeMeta `json:",inline"`
	placement.DrainReport
}

// DrainService is one Service of a DrainReport, for -o name.
type DrainService struct {
	metav1.TypeMeta `json:",inline"`
	placement.DrainService
}

func typeMeta(kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: statusGroupVersion.String(), Kind: kind}
}

// auditDocument is rep as audit prints it, and its Services as -o name prints them.
func auditDocument(rep placement.Report) (*AuditReport, []runtime.Object) {
	items := make([]runtime.Object, 0, len(rep.Services))
	for _, s := range rep.Services {
		items = append(items, &ServiceAudit{TypeMeta: typeMeta("ServiceAudit"), ServiceReport: s})
	}
	return &AuditReport{TypeMeta: typeMeta("AuditReport"), Report: rep}, items
}

// drainDocument is rep as drain-check prints it, and its Services as -o name prints them.
func drainDocument(rep placement.DrainReport) (*DrainReport, []runtime.Object) {
	items := make([]runtime.Object, 0, len(rep.Services))
	for _, s := range rep.Services {
		items = append(items, &DrainService{TypeMeta: typeMeta("DrainService"), DrainService: s})
	}
	return &DrainReport{TypeMeta: typeMeta("DrainReport"), DrainReport: rep}, items
}

// GetObjectMeta lets cli-runtime's name printer read the Service's name.
func (s *ServiceAudit) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Namespace: s.Service.Namespace, Name: s.Service.Name}
}

// GetObjectMeta lets cli-runtime's name printer read the Service's name.
func (s *DrainService) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name}
}

// The documents are plain JSON (every field exported and tagged, Severity a text value): a round trip through
// encoding/json is a deep copy, and cannot fail for them (TestDocumentsDeepCopy).

func (r *AuditReport) DeepCopyObject() runtime.Object  { return deepCopyJSON(r) }
func (s *ServiceAudit) DeepCopyObject() runtime.Object { return deepCopyJSON(s) }
func (r *DrainReport) DeepCopyObject() runtime.Object  { return deepCopyJSON(r) }
func (s *DrainService) DeepCopyObject() runtime.Object { return deepCopyJSON(s) }

func deepCopyJSON[T any](v *T) *T {
	b, err := json.Marshal(v)
	if err == nil {
		var c T
		if err = json.Unmarshal(b, &c); err == nil {
			return &c
		}
	}
	panic(fmt.Sprintf("deep copy of %T: %v", v, err))
}

// printDocument prints doc through cli-runtime's printer for -o (json, yaml, jsonpath, go-template), or for -o
// name each of items, as kubectl get -o name prints a list's items.
func printDocument(w io.Writer, flags printFlags, doc runtime.Object, items []runtime.Object) error {
	p, err := flags.print.ToPrinter()
	if err != nil {
		return badInput{err}
	}
	if *flags.print.OutputFormat == "name" {
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

// checkFor tells a format command does not print apart before anything is read: text (the default) and own
// are the command's own formats, the rest cli-runtime's printers.
func (f printFlags) checkFor(command string, own ...string) error {
	out := *f.print.OutputFormat
	if out == "" || out == "text" || slices.Contains(own, out) {
		return nil
	}
	if _, err := f.print.ToPrinter(); err != nil {
		return badInputf("unknown output format %q for %s: %s", out, command, strings.Join(f.formats(own...), ", "))
	}
	return nil
}

// formats lists the formats of a command whose own are own: text, own, then cli-runtime's.
func (f printFlags) formats(own ...string) []string {
	return slices.Concat([]string{"text"}, own, f.print.AllowedFormats())
}
