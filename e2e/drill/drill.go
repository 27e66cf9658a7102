// Package drill is the blackhole drill on a harness cluster: Service checkout in namespace kubelings with
// externalTrafficPolicy Local on NodePort 30090, three replicas all on one node (every other node drops the
// Service's external traffic), and its fix, one replica per node. The demo prints it; the e2e tests assert it.
package drill

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// The drill's fixed names.
const (
	Namespace  = "kubelings"
	Service    = "checkout"
	NodePort   = 30090
	TargetPort = cluster.BackendPort
	Replicas   = 3
)

// Apply creates the Service and puts all replicas on the first node.
func Apply(ctx context.Context, c *cluster.Cluster) error {
	if err := c.EnsureNamespace(ctx, Namespace); err != nil {
		return err
	}
	svc := cluster.NewService(Namespace, Service, corev1.ServiceTypeNodePort, cluster.WithAppLabel(), cluster.WithNodePort(NodePort))
	if _, err := c.Admin().CoreV1().Services(Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create service %s/%s: %w", Namespace, Service, err)
	}
	first := c.Nodes()[0].Name
	placement := make([]string, Replicas)
	for i := range placement {
		placement[i] = first
	}
	return place(ctx, c, placement)
}

// Fix spreads the replicas, one per node (as topology spread constraints would).
func Fix(ctx context.Context, c *cluster.Cluster) error {
	var placement []string
	for _, n := range c.Nodes() {
		if !n.ControlPlane { // tainted NoSchedule: no replica of the fix goes there
			placement = append(placement, n.Name)
		}
	}
	return place(ctx, c, placement)
}

// place runs replica i on placement[i] (replacing pods that sit on another node) and writes the EndpointSlice.
func place(ctx context.Context, c *cluster.Cluster, placement []string) error {
	var eps []cluster.Endpoint
	for i, node := range placement {
		name := fmt.Sprintf("%s-%d", Service, i)
		p := c.Pod(Namespace, name)
		if p != nil && p.Node != node {
			if err := c.DeletePod(ctx, Namespace, name); err != nil {
				return err
			}
			p = nil
		}
		if p == nil {
			var err error
			p, err = c.StartPod(ctx, cluster.PodConfig{Namespace: Namespace, Name: name, Node: node, Ports: []int{TargetPort}})
			if err != nil {
				return err
			}
		}
		eps = append(eps, cluster.Endpoint{Pod: p})
	}
	// Replicas beyond the placement are scaled away.
	for i := len(placement); ; i++ {
		name := fmt.Sprintf("%s-%d", Service, i)
		if c.Pod(Namespace, name) == nil {
			break
		}
		if err := c.DeletePod(ctx, Namespace, name); err != nil {
			return err
		}
	}
	return c.SetEndpoints(ctx, Namespace, Service, eps)
}

// Cleanup deletes the drill's Service, EndpointSlice and pods so another test can run it again.
func Cleanup(ctx context.Context, c *cluster.Cluster) error {
	for i := 0; ; i++ {
		name := fmt.Sprintf("%s-%d", Service, i)
		if c.Pod(Namespace, name) == nil {
			break
		}
		if err := c.DeletePod(ctx, Namespace, name); err != nil {
			return err
		}
	}
	err := c.Admin().DiscoveryV1().EndpointSlices(Namespace).Delete(ctx, cluster.SliceName(Service), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete drill EndpointSlice: %w", err)
	}
	err = c.Admin().CoreV1().Services(Namespace).Delete(ctx, Service, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete drill Service: %w", err)
	}
	return nil
}

// Row is what one node shows for the drill's Service.
type Row struct {
	Node      string
	Mode      cluster.ProxyMode
	Endpoints int            // replicas on the node
	Traffic   cluster.Result // a real request from the outside client to <node IP>:30090
	// Blackhole is the exporter's localtraffic_blackhole for the Service on this node; Known is false when the
	// exporter had no such series (or could not be scraped: ScrapeErr).
	Blackhole float64
	Known     bool
	ScrapeErr error
}

// ClientSeesBlackhole reports whether the real request timed out.
func (r Row) ClientSeesBlackhole() bool { return r.Traffic.Verdict == cluster.Blackhole }

// ExporterSaysBlackhole reports whether the exporter's verdict is blackhole.
func (r Row) ExporterSaysBlackhole() bool { return r.Known && r.Blackhole == 1 }

// Agrees reports whether the exporter's verdict matches what the client saw.
func (r Row) Agrees() bool {
	return r.Known && r.ClientSeesBlackhole() == r.ExporterSaysBlackhole() && r.Traffic.Verdict != cluster.Failed
}

// Observe sends one real request per node and scrapes each node's exporter.
func Observe(ctx context.Context, c *cluster.Cluster) []Row {
	var rows []Row
	for _, n := range c.Nodes() {
		if n.ControlPlane {
			// Excluded from load balancers (and from the drill's curl loop): the exporter counts it out of
			// rotation, so its drop is no blackhole.
			continue
		}
		r := Row{Node: n.Name, Mode: n.ProxyMode}
		for i := 0; ; i++ {
			p := c.Pod(Namespace, fmt.Sprintf("%s-%d", Service, i))
			if p == nil {
				break
			}
			if p.Node == n.Name {
				r.Endpoints++
			}
		}
		r.Traffic = c.Request(ctx, fmt.Sprintf("%s:%d", n.IP, NodePort))
		r.Blackhole, r.Known, r.ScrapeErr = exporterVerdict(ctx, c, n.Name)
		rows = append(rows, r)
	}
	return rows
}

// Print writes the rows as a table: node, mode, local replicas, what the client saw, what the exporter says.
func Print(w io.Writer, rows []Row) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tPROXY MODE\tLOCAL REPLICAS\tCLIENT SEES (real request to :30090)\tEXPORTER SAYS (localtraffic_blackhole)\t")
	for _, r := range rows {
		client := "ok"
		switch r.Traffic.Verdict {
		case cluster.OK:
			client = fmt.Sprintf("ok (HTTP %d)", r.Traffic.Status)
		case cluster.Blackhole:
			client = "BLACKHOLE (timeout)"
		default:
			client = strings.ToUpper(r.Traffic.String())
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t\n", r.Node, r.Mode, r.Endpoints, client, exporterWord(r.ScrapeErr, r.Known, r.Blackhole))
	}
	tw.Flush()
}

// exporterWord is how the tables show the exporter's localtraffic_blackhole for a node.
func exporterWord(scrapeErr error, known bool, blackhole float64) string {
	switch {
	case scrapeErr != nil:
		return "scrape failed: " + scrapeErr.Error()
	case !known:
		return "no series"
	case blackhole == 1:
		return "BLACKHOLE (1)"
	default:
		return fmt.Sprintf("ok (%g)", blackhole)
	}
}

// exporterVerdict scrapes node's exporter for the drill Service's localtraffic_blackhole.
func exporterVerdict(ctx context.Context, c *cluster.Cluster, node string) (v float64, known bool, err error) {
	m, err := c.Metrics(ctx, node)
	if err != nil {
		return 0, false, err
	}
	return m.Value("localtraffic_blackhole", cluster.Labels{"node": node, "namespace": Namespace, "service": Service})
}
