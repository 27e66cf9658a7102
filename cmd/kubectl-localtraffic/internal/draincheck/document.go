package draincheck

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/placement"
)

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

// document is rep as drain-check prints it, and its Services as -o name prints them.
func document(rep placement.DrainReport) (*DrainReport, []runtime.Object) {
	items := make([]runtime.Object, 0, len(rep.Services))
	for _, s := range rep.Services {
		items = append(items, &DrainService{TypeMeta: cli.TypeMeta("DrainService"), DrainService: s})
	}
	return &DrainReport{TypeMeta: cli.TypeMeta("DrainReport"), DrainReport: rep}, items
}

// GetObjectMeta lets cli-runtime's name printer read the Service's name.
func (s *DrainService) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name}
}

// DeepCopyObject makes the report a runtime.Object for cli-runtime's printers.
func (r *DrainReport) DeepCopyObject() runtime.Object { return cli.DeepCopyJSON(r) }

// DeepCopyObject makes the Service a runtime.Object for cli-runtime's printers.
func (s *DrainService) DeepCopyObject() runtime.Object { return cli.DeepCopyJSON(s) }
