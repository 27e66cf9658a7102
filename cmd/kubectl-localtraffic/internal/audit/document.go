package audit

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/placement"
)

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

// document is rep as audit prints it, and its Services as -o name prints them.
func document(rep placement.Report) (*AuditReport, []runtime.Object) {
	items := make([]runtime.Object, 0, len(rep.Services))
	for _, s := range rep.Services {
		items = append(items, &ServiceAudit{TypeMeta: cli.TypeMeta("ServiceAudit"), ServiceReport: s})
	}
	return &AuditReport{TypeMeta: cli.TypeMeta("AuditReport"), Report: rep}, items
}

// GetObjectMeta lets cli-runtime's name printer read the Service's name.
func (s *ServiceAudit) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Namespace: s.Service.Namespace, Name: s.Service.Name}
}

// DeepCopyObject makes the report a runtime.Object for cli-runtime's printers.
func (r *AuditReport) DeepCopyObject() runtime.Object { return cli.DeepCopyJSON(r) }

// DeepCopyObject makes the Service a runtime.Object for cli-runtime's printers.
func (s *ServiceAudit) DeepCopyObject() runtime.Object { return cli.DeepCopyJSON(s) }
