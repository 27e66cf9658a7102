package placement

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

// hcClass is what the check can see.
type hcClass int

const (
	// hcNodePort: HTTP on healthCheckNodePort (or IP targets that bypass nodes): nodes without a ready local
	// endpoint answer 503 and are drained.
	hcNodePort hcClass = iota
	// hcTrafficPort: the Service's own NodePort. kube-proxy drops the check's SYN on a node without a local
	// endpoint, so the check fails by timeout and the node is drained, late: new connections blackhole for the
	// unhealthy threshold × interval, and readiness (503 while pods terminate) is never seen.
	hcTrafficPort
	// hcMisdirected: a check that passes whether or not the node has a local endpoint (kube-proxy's 10256, another
	// port, TCP on healthCheckNodePort, whose listener accepts connections also when it answers 503), or none.
	hcMisdirected
)

type healthCheck struct {
	provider string
	class    hcClass
	detail   string // what the check asks, in words
	fix      string
}

const (
	annAWSType          = "service.beta.kubernetes.io/aws-load-balancer-type"
	annAWSTargetType    = "service.beta.kubernetes.io/aws-load-balancer-nlb-target-type"
	annAWSHCPort        = "service.beta.kubernetes.io/aws-load-balancer-healthcheck-port"
	annAWSHCProtocol    = "service.beta.kubernetes.io/aws-load-balancer-healthcheck-protocol"
	annDOOverride       = "service.beta.kubernetes.io/do-loadbalancer-override-health-check"
	annDOHCPort         = "service.beta.kubernetes.io/do-loadbalancer-healthcheck-port"
	annHetznerHCPort    = "load-balancer.hetzner.cloud/health-check-port"
	annHetznerHCProto   = "load-balancer.hetzner.cloud/health-check-protocol"
	annLinodeCheckType  = "service.beta.kubernetes.io/linode-loadbalancer-check-type"
	annScalewayFromSvc  = "service.beta.kubernetes.io/scw-loadbalancer-health-check-from-service"
	awsLBCClass         = "service.k8s.aws/nlb"
	kubeProxyHealthPort = 10256
)

// providerOf names the cloud controller that serves the Service: from its annotations, else from the nodes'
// providerID (live mode or --nodes-file), else "".
func providerOf(svc *corev1.Service, providerID string) string {
	t := svc.Annotations[annAWSType]
	if t == "external" || t == "nlb-ip" || (svc.Spec.LoadBalancerClass != nil && *svc.Spec.LoadBalancerClass == awsLBCClass) {
		return "aws-load-balancer-controller"
	}
	prefixes := []struct{ prefix, provider string }{
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
	for k := range svc.Annotations {
		for _, p := range prefixes {
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
func portClass(svc *corev1.Service, port int) (hcClass, string) {
	switch {
	case svc.Spec.HealthCheckNodePort != 0 && port == int(svc.Spec.HealthCheckNodePort):
		return hcNodePort, fmt.Sprintf("asks healthCheckNodePort %d", port)
	case port == kubeProxyHealthPort:
		return hcMisdirected, "asks kube-proxy's own health server (10256), which answers 200 for the node whatever the Service's endpoints"
	}
	for _, p := range svc.Spec.Ports {
		if int(p.NodePort) == port {
			return hcTrafficPort, fmt.Sprintf("asks the Service's own NodePort %d", port)
		}
	}
	hint := ""
	if svc.Spec.HealthCheckNodePort == 0 {
		hint = " (spec.healthCheckNodePort is not set, so it is allocated at random and cannot be this port)"
	}
	return hcMisdirected, fmt.Sprintf("asks port %d, which is not this Service's healthCheckNodePort%s: it answers whatever that port's owner answers, not whether this node has a local endpoint", port, hint)
}

// healthCheckOf reads where the Service's load balancer health-checks its nodes.
func healthCheckOf(svc *corev1.Service, providerID string) healthCheck {
	ns, name := svc.Namespace, svc.Name
	ann := svc.Annotations
	hc := healthCheck{provider: providerOf(svc, providerID), class: hcNodePort}
	annotate := func(kv ...string) string {
		return fmt.Sprintf("kubectl -n %s annotate service %s --overwrite %s", ns, name, strings.Join(kv, " "))
	}
	switch hc.provider {
	case "aws", "aws-load-balancer-controller":
		if hc.provider == "aws-load-balancer-controller" && ann[annAWSTargetType] == "ip" {
			hc.detail = "sends to pod IPs (nlb-target-type ip): kube-proxy's per-node path is not used"
			return hc
		}
		hc.fix = annotate(annAWSHCPort+"-", annAWSHCProtocol+"=http") + "  (the default port for Local is spec.healthCheckNodePort)"
		port, proto := ann[annAWSHCPort], strings.ToLower(ann[annAWSHCProtocol])
		switch {
		case port == "":
			hc.class, hc.detail = hcNodePort, "asks healthCheckNodePort (the default for Local)"
		case port == "traffic-port":
			hc.class, hc.detail = hcTrafficPort, "asks the traffic port (healthcheck-port: traffic-port)"
		default:
			n, err := strconv.Atoi(port)
			if err != nil {
				hc.class, hc.detail = hcMisdirected, fmt.Sprintf("has an unreadable healthcheck-port %q", port)
			} else {
				hc.class, hc.detail = portClass(svc, n)
			}
		}
		if hc.class == hcNodePort && proto != "" && proto != "http" {
			hc.class = hcMisdirected
			hc.detail += fmt.Sprintf(" over %s: kube-proxy's health check listener accepts every connection and speaks plain HTTP, so a %s check passes (tcp) or fails (https) on every node alike", proto, proto)
		}
	case "digitalocean":
		if _, ok := ann[annDOOverride]; ok {
			hc.class = hcTrafficPort
			hc.detail = "is overridden (do-loadbalancer-override-health-check) to a Service port's NodePort"
			if p := ann[annDOHCPort]; p != "" {
				hc.detail = fmt.Sprintf("is overridden (do-loadbalancer-override-health-check) to the NodePort of service port %s", p)
			}
			hc.fix = annotate(annDOOverride+"-") + "  (without the override the controller checks spec.healthCheckNodePort over HTTP)"
		} else {
			hc.detail = "asks healthCheckNodePort over HTTP (the controller's default when one is allocated)"
		}
	case "hetzner":
		hc.fix = annotate(annHetznerHCPort+"=<spec.healthCheckNodePort>", annHetznerHCProto+"=http") +
			"  (pin spec.healthCheckNodePort so the annotation can name it)"
		proto := strings.ToLower(ann[annHetznerHCProto])
		if p := ann[annHetznerHCPort]; p != "" {
			n, err := strconv.Atoi(p)
			if err != nil {
				hc.class, hc.detail = hcMisdirected, fmt.Sprintf("has an unreadable health-check-port %q", p)
			} else {
				hc.class, hc.detail = portClass(svc, n)
			}
			if hc.class == hcNodePort && proto != "http" {
				hc.class = hcMisdirected
				if proto == "" {
					proto = "tcp"
				}
				hc.detail += fmt.Sprintf(" over %s: kube-proxy's listener accepts the connection also when it answers 503", proto)
			}
		} else {
			hc.class, hc.detail = hcTrafficPort, "asks the destination NodePort over "+orDefault(proto, "tcp")+" (the controller's default)"
		}
	case "linode":
		if strings.EqualFold(ann[annLinodeCheckType], "none") {
			hc.class, hc.detail = hcMisdirected, "is disabled (linode-loadbalancer-check-type: none): no node is ever taken out"
		} else {
			hc.class, hc.detail = hcTrafficPort, "asks the NodePort ("+orDefault(ann[annLinodeCheckType], "connection")+" check); NodeBalancers cannot check another port"
		}
		hc.fix = annotate(annLinodeCheckType+"=connection") + "  (the NodeBalancer can only check the traffic port)"
	case "scaleway":
		v := strings.ToLower(ann[annScalewayFromSvc])
		if v == "true" || v == "*" || (v != "" && v != "false") {
			hc.detail = "asks healthCheckNodePort over HTTP (scw-loadbalancer-health-check-from-service)"
		} else {
			hc.class, hc.detail = hcTrafficPort, "asks the NodePort over TCP (the controller's default)"
		}
		hc.fix = annotate(annScalewayFromSvc + "=true")
	case "azure":
		hc.detail = "asks healthCheckNodePort over HTTP (cloud-provider-azure's probe for Local takes precedence over probe annotations)"
	case "gcp":
		hc.detail = "asks healthCheckNodePort over HTTP (GCE L4 load balancers for Local)"
	case "oracle":
		hc.detail = "asks healthCheckNodePort over HTTP (the OCI controller's checker for Local)"
	default:
		hc.detail = "is assumed to ask healthCheckNodePort over HTTP (no known cloud controller annotations; kube-proxy's contract)"
	}
	return hc
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
