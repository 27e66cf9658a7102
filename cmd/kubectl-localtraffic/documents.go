package main

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
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

// auditDocument is rep as audit prints it, and its Services as -o name prints them.
func auditDocument(rep placement.Report) (*AuditReport, []runtime.Object) {
	items := make([]runtime.Object, 0, len(rep.Services))
	for _, s := range rep.Services {
		items = append(items, &ServiceAudit{TypeMeta: cli.TypeMeta("ServiceAudit"), ServiceReport: s})
	}
	return &AuditReport{TypeMeta: cli.TypeMeta("AuditReport"), Report: rep}, items
}

// drainDocument is rep as drain-check prints it, and its Services as -o name prints them.
func drainDocument(rep placement.DrainReport) (*DrainReport, []runtime.Object) {
	items := make([]runtime.Object, 0, len(rep.Services))
	for _, s := range rep.Services {
		items = append(items, &DrainService{TypeMeta: cli.TypeMeta("DrainService"), DrainService: s})
	}
	return &DrainReport{TypeMeta: cli.TypeMeta("DrainReport"), DrainReport: rep}, items
}

// GetObjectMeta lets cli-runtime's name printer read the Service's name.
func (s *ServiceAudit) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Namespace: s.Service.Namespace, Name: s.Service.Name}
}

// GetObjectMeta lets cli-runtime's name printer read the Service's name.
func (s *DrainService) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name}
}

func (r *AuditReport) DeepCopyObject() runtime.Object  { return cli.DeepCopyJSON(r) }
func (s *ServiceAudit) DeepCopyObject() runtime.Object { return cli.DeepCopyJSON(s) }
func (r *DrainReport) DeepCopyObject() runtime.Object  { return cli.DeepCopyJSON(r) }
func (s *DrainService) DeepCopyObject() runtime.Object { return cli.DeepCopyJSON(s) }
