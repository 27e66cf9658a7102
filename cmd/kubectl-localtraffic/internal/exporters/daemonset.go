package exporters

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/localtraffic/localtraffic-exporter/cmd/internal/endpoint"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
)

// The exporter's own defaults (its --web.listen-address and --web.telemetry-path), for a DaemonSet whose
// exporter container does not set them: the exporter's flags default to the same constants.
const (
	exporterDefaultListen = endpoint.DefaultListenAddress
	exporterDefaultPath   = endpoint.DefaultPath
)

// exporterInstall is where the installed DaemonSet's exporter serves its metrics, read from the DaemonSet itself
// (deploy/base, the Helm chart with any nameOverride, port or path): its pods, and in each pod the exporter's own
// listener. A kube-rbac-proxy in front of it (deploy/base) listens on the node's address only; the plugin reaches
// the exporter's listener from inside the pod (a port-forward), where it answers without a token.
type exporterInstall struct {
	daemonSet *appsv1.DaemonSet
	// port is the exporter's own listen port; scheme is https when its --web.config.file may turn TLS on.
	port   int
	scheme string
	path   string
}

// findExporter reads the exporter's DaemonSet in namespace: the one named name, or, when name is "", the only
// DaemonSet there that runs the exporter (a container with the exporter's flags).
func findExporter(ctx context.Context, cs kubernetes.Interface, namespace, name string) (*exporterInstall, error) {
	var candidates []appsv1.DaemonSet
	if name != "" {
		ds, err := cs.AppsV1().DaemonSets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, cli.APIError{Err: fmt.Errorf("reading the exporter's DaemonSet %s/%s: %w", namespace, name, err)}
		}
		candidates = []appsv1.DaemonSet{*ds}
	} else {
		list, err := cs.AppsV1().DaemonSets(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, cli.APIError{Err: fmt.Errorf("listing DaemonSets in %s to find the exporter's: %w", namespace, err)}
		}
		for _, ds := range list.Items {
			if exporterContainer(ds.Spec.Template.Spec) != nil {
				candidates = append(candidates, ds)
			}
		}
		switch len(candidates) {
		case 0:
			return nil, cli.BadInputf("no DaemonSet in namespace %s runs the exporter: name its namespace with --exporter-namespace", namespace)
		case 1:
		default:
			var names []string
			for _, ds := range candidates {
				names = append(names, ds.Name)
			}
			return nil, cli.BadInputf("several DaemonSets in namespace %s run the exporter (%s): choose one with --exporter-daemonset", namespace, strings.Join(names, ", "))
		}
	}
	return exporterOf(&candidates[0])
}

// exporterOf reads the exporter's listener from the DaemonSet's pod template.
func exporterOf(ds *appsv1.DaemonSet) (*exporterInstall, error) {
	c := exporterContainer(ds.Spec.Template.Spec)
	if c == nil {
		return nil, cli.BadInputf("DaemonSet %s/%s runs no exporter container (none has --node-name or --web.listen-address)", ds.Namespace, ds.Name)
	}
	args := slices.Concat(c.Command, c.Args)
	in := &exporterInstall{daemonSet: ds, scheme: "http", path: exporterDefaultPath}
	listens := flagValues(args, "--web.listen-address")
	if len(listens) == 0 {
		listens = []string{exporterDefaultListen}
	}
	// A port-forward reaches the pod's loopback: a listener on the loopback or on every address.
	for _, l := range listens {
		host, port, err := net.SplitHostPort(l)
		if err != nil {
			continue
		}
		p, err := strconv.Atoi(port)
		if err != nil || p <= 0 {
			continue
		}
		if ip := net.ParseIP(host); host == "" || host == "localhost" || (ip != nil && (ip.IsLoopback() || ip.IsUnspecified())) {
			in.port = p
			break
		}
	}
	if in.port == 0 {
		return nil, cli.BadInputf("DaemonSet %s/%s: the exporter listens on %s, none on the pod's loopback, which a port-forward reaches",
			ds.Namespace, ds.Name, strings.Join(listens, ", "))
	}
	if p := flagValues(args, "--web.telemetry-path"); len(p) > 0 {
		in.path = p[len(p)-1]
	}
	if w := flagValues(args, "--web.config.file"); len(w) > 0 && w[len(w)-1] != "" {
		// exporter-toolkit's web config may turn TLS on; the plugin tries HTTPS and says so if the config also
		// asks for credentials it does not have.
		in.scheme = "https"
	}
	return in, nil
}

// exporterContainer is the pod template's exporter: the container with the exporter's own flags (not
// kube-rbac-proxy's --upstream).
func exporterContainer(spec corev1.PodSpec) *corev1.Container {
	for i := range spec.Containers {
		c := &spec.Containers[i]
		args := slices.Concat(c.Command, c.Args)
		if len(flagValues(args, "--upstream")) > 0 {
			continue
		}
		if len(flagValues(args, "--node-name")) > 0 || len(flagValues(args, "--web.listen-address")) > 0 {
			return c
		}
	}
	return nil
}

// flagValues returns every value of a kingpin flag in args, written --flag=value or --flag value.
func flagValues(args []string, flag string) []string {
	var out []string
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			out = append(out, v)
		} else if a == flag && i+1 < len(args) {
			out = append(out, args[i+1])
		}
	}
	return out
}
