package eventwriter

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/localtraffic/localtraffic-exporter/exposure"
)

// peer is one exporter the leader polls: its key in the cursors (its node's name, or its address where the
// EndpointSlice names no node) and where its /episodes is.
type peer struct {
	key, url string
}

// listPeers reads the exporters' Service's EndpointSlices: every serving endpoint address at the slice's port
// (the first: the exporters' Service has one). The exporter's ClusterRole already lists EndpointSlices.
func listPeers(ctx context.Context, c EndpointSlices, namespace, service, scheme string) ([]peer, error) {
	list, err := c.List(ctx, namespace, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + service})
	if err != nil {
		return nil, fmt.Errorf("listing the EndpointSlices of %s/%s: %w", namespace, service, err)
	}
	seen := map[string]bool{}
	var out []peer
	for _, s := range list {
		if len(s.Ports) == 0 || s.Ports[0].Port == nil {
			continue
		}
		port := strconv.Itoa(int(*s.Ports[0].Port))
		for _, e := range s.Endpoints {
			if e.Conditions.Serving != nil && !*e.Conditions.Serving || len(e.Addresses) == 0 {
				continue
			}
			addr := e.Addresses[0]
			key := addr
			if e.NodeName != nil && *e.NodeName != "" {
				key = *e.NodeName
			}
			if seen[key] {
				continue // a dual-stack Service's other family's slice: the same exporter
			}
			seen[key] = true
			out = append(out, peer{key: key, url: scheme + "://" + net.JoinHostPort(addr, port) + "/episodes"})
		}
	}
	slices.SortFunc(out, func(a, b peer) int { return cmp.Compare(a.key, b.key) })
	return out, nil
}

// maxPage bounds what one peer's answer may be: a full ring of episodes is about 130 kB.
const maxPage = 4 << 20

// peerClient asks peers for their episodes.
type peerClient struct {
	http *http.Client
	// token is read at each ask ("" for http: no token is sent in the clear).
	token func() (string, error)
}

// newPeerClient builds the client of cfg's scheme: over https, verifying with cfg.CAFile when it is set.
func newPeerClient(cfg Config) (*peerClient, error) {
	tr := &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 1, DisableCompression: false}
	pc := &peerClient{http: &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse // a peer answers itself; a redirect would carry the token elsewhere
	}}, token: func() (string, error) { return "", nil }}
	if cfg.PeersScheme != "https" {
		return pc, nil
	}
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.CAFile == "" {
		// kube-rbac-proxy's certificate is self-signed unless the cluster owner gives it one: without a CA the
		// leader trusts that the EndpointSlice's addresses are the exporters (docs/exposure.md, "Events").
		tr.TLSClientConfig.InsecureSkipVerify = true //nolint:gosec // documented, opt-in by leaving the CA out
	} else {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("reading --events.peers-ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--events.peers-ca-file %s holds no PEM certificate", cfg.CAFile)
		}
		tr.TLSClientConfig.RootCAs = pool
	}
	file := cfg.TokenFile
	pc.token = func() (string, error) {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("reading the token: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	return pc, nil
}

// errPeer is a peer's failure: its kind (unreachable, timeout, forbidden, status, invalid, token) labels the log
// line, and a change of kind is logged again.
type errPeer struct {
	kind string
	err  error
}

func (e *errPeer) Error() string { return e.kind + ": " + e.err.Error() }
func (e *errPeer) Unwrap() error { return e.err }

// page asks p for its episodes after seq, under ctx (which carries the per-peer timeout).
func (pc *peerClient) page(ctx context.Context, p peer, seq uint64) (exposure.Page, error) {
	var pg exposure.Page
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url+"?after="+strconv.FormatUint(seq, 10), nil)
	if err != nil {
		return pg, &errPeer{"invalid", err}
	}
	tok, err := pc.token()
	if err != nil {
		return pg, &errPeer{"token", err}
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := pc.http.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return pg, &errPeer{"timeout", err}
		}
		return pg, &errPeer{"unreachable", err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
			// kube-rbac-proxy's TokenReview or SubjectAccessReview said no: the one cause the cluster owner mends in
			// RBAC, so the line names what is missing.
			return pg, &errPeer{"forbidden", fmt.Errorf("HTTP %d from %s: this exporter's ServiceAccount may not GET /episodes there "+
				"(deploy/overlays/events grants it, nonResourceURLs [/episodes], verb get)", resp.StatusCode, p.url)}
		}
		return pg, &errPeer{"status", fmt.Errorf("HTTP %d from %s", resp.StatusCode, p.url)}
	}
	dec := json.NewDecoder(io.LimitReader(resp.Body, maxPage))
	if err := dec.Decode(&pg); err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return pg, &errPeer{"timeout", err}
		}
		return pg, &errPeer{"invalid", fmt.Errorf("decoding %s: %w", p.url, err)}
	}
	if pg.Instance == "" || pg.Node == "" {
		return pg, &errPeer{"invalid", fmt.Errorf("%s answered without an instance or node", p.url)}
	}
	for i, f := range pg.Episodes {
		if f.Seq <= seq || i > 0 && f.Seq <= pg.Episodes[i-1].Seq {
			return pg, &errPeer{"invalid", fmt.Errorf("%s answered episodes out of order", p.url)}
		}
	}
	return pg, nil
}
