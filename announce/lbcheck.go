package announce

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Where a LoadBalancer Service's load balancer sends its health check, read from each cloud controller's
// documented annotations (docs/audit.md has the table and the sources). kube-proxy answers on
// spec.healthCheckNodePort, over plain HTTP, 200 only while the node has a ready local endpoint: that is the check
// that takes a node without one out of rotation before clients notice.

// LBCheckClass is what a load balancer's health check can see.
type LBCheckClass int

const (
	// LBCheckNodePort: HTTP on healthCheckNodePort (or IP targets that bypass nodes): nodes without a ready local
	// endpoint answer 503 and are drained.
	LBCheckNodePort LBCheckClass = iota
	// LBCheckTrafficPort: the Service's own NodePort. kube-proxy drops the check's SYN on a node without a local
	// endpoint, so the check fails by timeout and the node is drained, late: new connections blackhole for the
	// unhealthy threshold × interval, and readiness (503 while pods terminate) is never seen.
	LBCheckTrafficPort
	// LBCheckMisdirected: a check that passes whether or not the node has a local endpoint (kube-proxy's 10256, another
	// port, TCP on healthCheckNodePort, whose listener accepts connections also when it answers 503), or none.
	LBCheckMisdirected
)

// LBCheck is where a LoadBalancer Service's load balancer sends its health check.
type LBCheck struct {
	Provider string // the cloud controller, "" when unknown
	Class    LBCheckClass
	Detail   string // what the check asks, in words
	Fix      string
}

const (
	AnnAWSType          = "service.beta.kubernetes.io/aws-load-balancer-type"
	AnnAWSTargetType    = "service.beta.kubernetes.io/aws-load-balancer-nlb-target-type"
	AnnAWSHCPort        = "service.beta.kubernetes.io/aws-load-balancer-healthcheck-port"
	AnnAWSHCProtocol    = "service.beta.kubernetes.io/aws-load-balancer-healthcheck-protocol"
	AnnDOOverride       = "service.beta.kubernetes.io/do-loadbalancer-override-health-check"
	AnnDOHCPort         = "service.beta.kubernetes.io/do-loadbalancer-healthcheck-port"
	AnnHetznerHCPort    = "load-balancer.hetzner.cloud/health-check-port"
	AnnHetznerHCProto   = "load-balancer.hetzner.cloud/health-check-protocol"
	AnnLinodeCheckType  = "service.beta.kubernetes.io/linode-loadbalancer-check-type"
	AnnScalewayFromSvc  = "service.beta.kubernetes.io/scw-loadbalancer-health-check-from-service"
	awsLBCClass         = "service.k8s.aws/nlb"
	kubeProxyHealthPort = 10256
)

// providerPrefixes are the cloud controllers' annotation prefixes: the exporter's Service transform keeps the
// annotations under them (the health check's class needs nothing else).
var providerPrefixes = []struct{ prefix, provider string }{
	{"service.beta.kubernetes.io/aws-load-balancer-", "aws"},
	{"service.beta.kubernetes.io/azure-", "azure"},
	{"cloud.google.com/", "gcp"},
	{"networking.gke.io/", "gcp"},
	{"service.beta.kubernetes.io/do-loadbalancer-", "digitalocean"},
	{"load-balancer.hetzner.cloud/", "hetzner"},
	{"service.beta.kubernetes.io/linode-loadbalancer-", "linode"},
	{"service.beta.kubernetes.io/oci-", "oracle"},
	{"oci-network-load-balancer.oraclecloud.com/", "oracle"},
	{"oci.oraclecloud.com/", "oracle"},
	{"service.beta.kubernetes.io/scw-loadbalancer-", "scaleway"},
}

// ProviderOf names the cloud controller that serves the Service: from its annotations, else from the nodes'
// providerID (live mode or --nodes-file), else "".
func ProviderOf(svc *corev1.Service, providerID string) string {
	t := svc.Annotations[AnnAWSType]
	if t == "external" || t == "nlb-ip" || (svc.Spec.LoadBalancerClass != nil && *svc.Spec.LoadBalancerClass == awsLBCClass) {
		return "aws-load-balancer-controller"
	}
	for k := range svc.Annotations {
		for _, p := range providerPrefixes {
			if strings.HasPrefix(k, p.prefix) {
				return p.provider
			}
		}
	}
	ids := []struct{ prefix, provider string }{
		{"aws://", "aws"}, {"azure://", "azure"}, {"gce://", "gcp"}, {"digitalocean://", "digitalocean"},
		{"hcloud://", "hetzner"}, {"linode://", "linode"}, {"oci://", "oracle"}, {"ocid1.", "oracle"},
		{"scaleway://", "scaleway"},
	}
	for _, p := range ids {
		if strings.HasPrefix(providerID, p.prefix) {
			return p.provider
		}
	}
	return ""
}

// portClass classifies a fixed health check port against the Service.
func portClass(svc *corev1.Service, port int) (LBCheckClass, string) {
	switch {
	case svc.Spec.HealthCheckNodePort != 0 && port == int(svc.Spec.HealthCheckNodePort):
		return LBCheckNodePort, fmt.Sprintf("asks healthCheckNodePort %d", port)
	case port == kubeProxyHealthPort:
		return LBCheckMisdirected, "asks kube-proxy's own health server (10256), which answers 200 for the node whatever the Service's endpoints"
	}
	for _, p := range svc.Spec.Ports {
		if int(p.NodePort) == port {
			return LBCheckTrafficPort, fmt.Sprintf("asks the Service's own NodePort %d", port)
		}
	}
	hint := ""
	if svc.Spec.HealthCheckNodePort == 0 {
		hint = " (spec.healthCheckNodePort is not set, so it is allocated at random and cannot be this port)"
	}
	return LBCheckMisdirected, fmt.Sprintf("asks port %d, which is not this Service's healthCheckNodePort%s: it answers whatever that port's owner answers, not whether this node has a local endpoint", port, hint)
}

// LBCheckOf reads where the Service's load balancer health-checks its nodes, from its annotations and
// loadBalancerClass, else from the nodes' providerID ("" when unknown).
func LBCheckOf(svc *corev1.Service, providerID string) LBCheck {
	ns, name := svc.Namespace, svc.Name
	ann := svc.Annotations
	hc := LBCheck{Provider: ProviderOf(svc, providerID), Class: LBCheckNodePort}
	if d, ok := declaredLBCheck(svc, hc.Provider); ok {
		return d
	}
	annotate := func(kv ...string) string {
		return fmt.Sprintf("kubectl -n %s annotate service %s --overwrite %s", ns, name, strings.Join(kv, " "))
	}
	switch hc.Provider {
	case "aws", "aws-load-balancer-controller":
		if hc.Provider == "aws-load-balancer-controller" && ann[AnnAWSTargetType] == "ip" {
			hc.Detail = "sends to pod IPs (nlb-target-type ip): kube-proxy's per-node path is not used"
			return hc
		}
		hc.Fix = annotate(AnnAWSHCPort+"-", AnnAWSHCProtocol+"=http") + "  (the default port for Local is spec.healthCheckNodePort)"
		port, proto := ann[AnnAWSHCPort], strings.ToLower(ann[AnnAWSHCProtocol])
		switch {
		case port == "":
			hc.Class, hc.Detail = LBCheckNodePort, "asks healthCheckNodePort (the default for Local)"
		case port == "traffic-port":
			hc.Class, hc.Detail = LBCheckTrafficPort, "asks the traffic port (healthcheck-port: traffic-port)"
		default:
			n, err := strconv.Atoi(port)
			if err != nil {
				hc.Class, hc.Detail = LBCheckMisdirected, fmt.Sprintf("has an unreadable healthcheck-port %q", port)
			} else {
				hc.Class, hc.Detail = portClass(svc, n)
			}
		}
		if hc.Class == LBCheckNodePort && proto != "" && proto != "http" {
			hc.Class = LBCheckMisdirected
			hc.Detail += fmt.Sprintf(" over %s: kube-proxy's health check listener accepts every connection and speaks plain HTTP, so a %s check passes (tcp) or fails (https) on every node alike", proto, proto)
		}
	case "digitalocean":
		if _, ok := ann[AnnDOOverride]; ok {
			hc.Class = LBCheckTrafficPort
			hc.Detail = "is overridden (do-loadbalancer-override-health-check) to a Service port's NodePort"
			if p := ann[AnnDOHCPort]; p != "" {
				hc.Detail = fmt.Sprintf("is overridden (do-loadbalancer-override-health-check) to the NodePort of service port %s", p)
			}
			hc.Fix = annotate(AnnDOOverride+"-") + "  (without the override the controller checks spec.healthCheckNodePort over HTTP)"
		} else {
			hc.Detail = "asks healthCheckNodePort over HTTP (the controller's default when one is allocated)"
		}
	case "hetzner":
		hc.Fix = annotate(AnnHetznerHCPort+"=<spec.healthCheckNodePort>", AnnHetznerHCProto+"=http") +
			"  (pin spec.healthCheckNodePort so the annotation can name it)"
		proto := strings.ToLower(ann[AnnHetznerHCProto])
		if p := ann[AnnHetznerHCPort]; p != "" {
			n, err := strconv.Atoi(p)
			if err != nil {
				hc.Class, hc.Detail = LBCheckMisdirected, fmt.Sprintf("has an unreadable health-check-port %q", p)
			} else {
				hc.Class, hc.Detail = portClass(svc, n)
			}
			if hc.Class == LBCheckNodePort && proto != "http" {
				hc.Class = LBCheckMisdirected
				if proto == "" {
					proto = "tcp"
				}
				hc.Detail += fmt.Sprintf(" over %s: kube-proxy's listener accepts the connection also when it answers 503", proto)
			}
		} else {
			hc.Class, hc.Detail = LBCheckTrafficPort, "asks the destination NodePort over "+orDefault(proto, "tcp")+" (the controller's default)"
		}
	case "linode":
		if strings.EqualFold(ann[AnnLinodeCheckType], "none") {
			hc.Class, hc.Detail = LBCheckMisdirected, "is disabled (linode-loadbalancer-check-type: none): no node is ever taken out"
		} else {
			hc.Class, hc.Detail = LBCheckTrafficPort, "asks the NodePort ("+orDefault(ann[AnnLinodeCheckType], "connection")+" check); NodeBalancers cannot check another port"
		}
		hc.Fix = annotate(AnnLinodeCheckType+"=connection") + "  (the NodeBalancer can only check the traffic port)"
	case "scaleway":
		v := strings.ToLower(ann[AnnScalewayFromSvc])
		if v == "true" || v == "*" || (v != "" && v != "false") {
			hc.Detail = "asks healthCheckNodePort over HTTP (scw-loadbalancer-health-check-from-service)"
		} else {
			hc.Class, hc.Detail = LBCheckTrafficPort, "asks the NodePort over TCP (the controller's default)"
		}
		hc.Fix = annotate(AnnScalewayFromSvc + "=true")
	case "azure":
		hc.Detail = "asks healthCheckNodePort over HTTP (cloud-provider-azure's probe for Local takes precedence over probe annotations)"
	case "gcp":
		hc.Detail = "asks healthCheckNodePort over HTTP (GCE L4 load balancers for Local)"
	case "oracle":
		hc.Detail = "asks healthCheckNodePort over HTTP (the OCI controller's checker for Local)"
	default:
		hc.Detail = "is assumed to ask healthCheckNodePort over HTTP (no known cloud controller annotations; kube-proxy's contract)"
	}
	return hc
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// KeepLBCheckAnnotations copies the annotations LBCheckOf reads (the cloud controllers' prefixes and
// AnnotationHealthCheck) out of a Service's map; nil when it has none.
func KeepLBCheckAnnotations(ann map[string]string) map[string]string {
	var out map[string]string
	for k, v := range ann {
		if k == AnnotationHealthCheck {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
			continue
		}
		for _, p := range providerPrefixes {
			if strings.HasPrefix(k, p.prefix) {
				if out == nil {
					out = map[string]string{}
				}
				out[k] = v
				break
			}
		}
	}
	return out
}

// ServiceLBCheck is the Service's health check class from its own annotations, and whether no cloud
// controller's annotation decided it (the nodes' provider then does: kubeview's ServiceState.LBCheckOn).
func ServiceLBCheck(svc *corev1.Service) (LBCheckClass, bool) {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return LBCheckNodePort, false
	}
	if d, ok := declaredLBCheck(svc, ""); ok {
		return d.Class, false // declared: the nodes' provider does not override the owner
	}
	return LBCheckOf(svc, "").Class, ProviderOf(svc, "") == ""
}
