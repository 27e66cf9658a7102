package announce

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// AnnotationHealthCheck declares how the Service's load balancer checks the nodes, for the load balancers the
// cloud annotations do not describe (HAProxy `check`, an F5 TCP monitor, NGINX `health_check` in front of a
// NodePort, a LoadBalancer Service of a controller this project does not know). Its value is one of the
// DeclaredCheck words. It takes precedence over what the cloud controllers' annotations say (LBCheckOf) and
// over what the arrivals meter infers from steady sources: the Service's owner knows.
const AnnotationHealthCheck = "localtraffic.io/health-check"

// DeclaredCheck is a value of AnnotationHealthCheck.
type DeclaredCheck string

// The declared checks. The words are what an SRE would write in the load balancer's own configuration.
const (
	// CheckUndeclared: no annotation, or one with an unknown value (the cloud annotations and the meter's
	// checker recognition decide).
	CheckUndeclared DeclaredCheck = ""
	// CheckTrafficPort: the load balancer opens connections to the Service's NodePort on every node (a TCP
	// check of the traffic port). Those connections are checks, not clients: a node that drops them is
	// drained by the load balancer itself.
	CheckTrafficPort DeclaredCheck = "traffic-port"
	// CheckHealthCheckNodePort: the load balancer asks spec.healthCheckNodePort over HTTP (kube-proxy's
	// contract). Nothing it sends to the NodePort is a check: every arrival there is a client.
	CheckHealthCheckNodePort DeclaredCheck = "health-check-node-port"
	// CheckNone: nothing checks the nodes. Every arrival is a client, however steady its cadence.
	CheckNone DeclaredCheck = "none"
)

// DeclaredChecks lists the values AnnotationHealthCheck accepts.
var DeclaredChecks = []DeclaredCheck{CheckTrafficPort, CheckHealthCheckNodePort, CheckNone}

// DeclaredCheckOf reads the Service's AnnotationHealthCheck: the declared check, and whether the annotation
// is present with a value it does not know (ignored: the Service is then judged as undeclared, and the
// plugin's audit says so).
func DeclaredCheckOf(ann map[string]string) (DeclaredCheck, bool) {
	v, ok := ann[AnnotationHealthCheck]
	if !ok {
		return CheckUndeclared, false
	}
	v = strings.ToLower(strings.TrimSpace(v))
	for _, d := range DeclaredChecks {
		if v == string(d) {
			return d, false
		}
	}
	return CheckUndeclared, true
}

// Class is the LBCheckClass the declaration stands for; ok is false when undeclared.
func (d DeclaredCheck) Class() (LBCheckClass, bool) {
	switch d {
	case CheckTrafficPort:
		return LBCheckTrafficPort, true
	case CheckHealthCheckNodePort:
		return LBCheckNodePort, true
	case CheckNone:
		return LBCheckMisdirected, true
	}
	return LBCheckNodePort, false
}

// declaredLBCheck is LBCheckOf's answer for a Service that declares its check; ok is false when it does not.
func declaredLBCheck(svc *corev1.Service, provider string) (LBCheck, bool) {
	d, _ := DeclaredCheckOf(svc.Annotations)
	class, ok := d.Class()
	if !ok {
		return LBCheck{}, false
	}
	hc := LBCheck{Provider: provider, Class: class}
	fix := fmt.Sprintf("point the load balancer's check at spec.healthCheckNodePort over HTTP, then "+
		"kubectl -n %s annotate service %s --overwrite %s=%s", svc.Namespace, svc.Name, AnnotationHealthCheck, CheckHealthCheckNodePort)
	switch d {
	case CheckTrafficPort:
		hc.Detail = fmt.Sprintf("asks the Service's own NodePort (declared: %s: %s)", AnnotationHealthCheck, d)
		hc.Fix = fix
	case CheckHealthCheckNodePort:
		hc.Detail = fmt.Sprintf("asks healthCheckNodePort over HTTP (declared: %s: %s)", AnnotationHealthCheck, d)
	case CheckNone:
		hc.Detail = fmt.Sprintf("is declared absent (%s: %s): no node is ever taken out", AnnotationHealthCheck, d)
		hc.Fix = fix
	}
	return hc, true
}
