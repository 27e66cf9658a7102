package ciliumsvc

// The agent's JSON, as Cilium v1.18 serializes it: GET /v1/service answers a list of models.Service, each
// with its spec (models.ServiceSpec: one frontend, its backends, its flags) and status. The structs below
// are our own copies of the fields the reader needs, under the models' JSON names (go-swagger's
// api/v1/models: Service, ServiceSpec, ServiceSpecFlags, FrontendAddress, BackendAddress, ServiceStatus), so
// the exporter does not import Cilium. Cilium fills them in loadbalancer.Frontend.ToModel: one entry per
// frontend of its frontends table, whose backends are the ones the frontend may send to.
//
// What the reader relies on of that release's load balancer (pkg/loadbalancer):
//   - A NodePort frontend is listed once per family with the unspecified address (0.0.0.0 or ::); the
//     datapath expands it to every NodePort address of the node. (Older releases listed one per node address:
//     every NodePort frontend is the NodePort destination, whatever its address.)
//   - A frontend's backends are already selected for its scope: with externalTrafficPolicy Local, the
//     external scope of a NodePort, LoadBalancer or ExternalIPs frontend lists only the backends on this
//     node (and those without a node name); where the internal policy differs, a second entry of the same
//     frontend with scope "internal" lists the backends internal traffic may use.
//   - Of a frontend's backends the datapath uses the active ones, the terminating ones only when none is
//     active (kube-proxy's terminating-endpoint fallback), never the quarantined ones (health checking) nor
//     those in maintenance.
//   - A frontend without a usable backend answers new connections with Cilium's no-backend response (an
//     ICMP unreachable by default, a drop with --service-no-backend-response=drop): for external traffic of
//     a Local Service whose endpoints are all elsewhere, the node does not serve it — the seam's drop.

// service is models.Service.
type service struct {
	Spec   *serviceSpec   `json:"spec,omitempty"`
	Status *serviceStatus `json:"status,omitempty"`
}

// serviceStatus is models.ServiceStatus: what the datapath realized (Cilium copies the spec).
type serviceStatus struct {
	Realized *serviceSpec `json:"realized,omitempty"`
}

// serviceSpec is models.ServiceSpec.
type serviceSpec struct {
	BackendAddresses []*backendAddress `json:"backend-addresses"`
	Flags            *serviceSpecFlags `json:"flags,omitempty"`
	FrontendAddress  *frontendAddress  `json:"frontend-address"`
	ID               int64             `json:"id,omitempty"`
	UpdateServices   bool              `json:"updateServices,omitempty"`
}

// serviceSpecFlags is models.ServiceSpecFlags: the frontend's type and its Service.
type serviceSpecFlags struct {
	Cluster string `json:"cluster,omitempty"`
	// ExtTrafficPolicy is the Service's externalTrafficPolicy ("Cluster" or "Local"); TrafficPolicy is its
	// older spelling, kept equal by Cilium.
	ExtTrafficPolicy string `json:"extTrafficPolicy,omitempty"`
	// HealthCheckNodePort is the Service's, which Cilium serves itself; the reader does not use it: the
	// exporter probes the port as a load balancer does (nodeprobe), whatever answers it.
	HealthCheckNodePort uint16 `json:"healthCheckNodePort,omitempty"`
	IntTrafficPolicy    string `json:"intTrafficPolicy,omitempty"`
	Name                string `json:"name,omitempty"`
	Namespace           string `json:"namespace,omitempty"`
	NatPolicy           string `json:"natPolicy,omitempty"`
	TrafficPolicy       string `json:"trafficPolicy,omitempty"`
	// Type is ClusterIP, NodePort, ExternalIPs, HostPort, LoadBalancer or LocalRedirect.
	Type string `json:"type,omitempty"`
}

// frontendAddress is models.FrontendAddress.
type frontendAddress struct {
	IP   string `json:"ip,omitempty"`
	Port uint16 `json:"port,omitempty"`
	// Protocol is "TCP", "UDP", "SCTP" (or "ANY"); the enum is matched without regard to case.
	Protocol string `json:"protocol,omitempty"`
	// Scope is "external" or "internal" (see above); absent means external.
	Scope string `json:"scope,omitempty"`
}

// backendAddress is models.BackendAddress.
type backendAddress struct {
	// IP is the backend's address, "@<cluster id>" appended for a backend of another cluster of a mesh.
	IP *string `json:"ip"`
	// NodeName is the backend's node where the EndpointSlice names it. The reader relies on Cilium's own
	// selection of a frontend's backends (above), which used it, rather than judging locality again.
	NodeName  string `json:"nodeName,omitempty"`
	Port      uint16 `json:"port,omitempty"`
	Preferred bool   `json:"preferred,omitempty"`
	Protocol  string `json:"protocol,omitempty"`
	// State is active, terminating, quarantined or maintenance.
	State  string  `json:"state,omitempty"`
	Weight *uint16 `json:"weight,omitempty"`
	Zone   string  `json:"zone,omitempty"`
}

// Frontend types and scopes, and backend states, as the models spell them.
const (
	typeClusterIP    = "ClusterIP"
	typeNodePort     = "NodePort"
	typeExternalIPs  = "ExternalIPs"
	typeLoadBalancer = "LoadBalancer"

	scopeInternal = "internal"

	stateActive      = "active"
	stateTerminating = "terminating"

	policyLocal = "Local"
)
