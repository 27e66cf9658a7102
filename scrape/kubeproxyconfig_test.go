package scrape

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/scrape/scrapetest"
)

// Where the exporter's view of kube-proxy's configuration comes from is exported: read from /configz (here from
// the fallback address, as on a node where kube-proxy's metrics server binds [::1]), its last read while
// /configz is unreadable, or kube-proxy's defaults before any read.
func TestKubeProxyConfigState(t *testing.T) {
	var up atomic.Bool
	up.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !up.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, `{"kubeproxy.config.k8s.io":{"detectLocalMode":"InterfaceNamePrefix","detectLocal":{"interfaceNamePrefix":"cali"}}}`)
	}))
	t.Cleanup(srv.Close)
	refused := httptest.NewServer(http.NotFoundHandler())
	refusedURL := refused.URL + "/configz"
	refused.Close() // nothing listens there any more: refused, as 127.0.0.1:10249 where kube-proxy binds [::1]

	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	view := &scrapetest.View{Snap: kubeview.Snapshot{Node: kubeview.NodeState{Name: "node-1", Found: true, InternalIPs: []string{"127.0.0.1"}}}}
	g := NewGatherer(GathererConfig{View: view, Addrs: scrapetest.Addrs{"127.0.0.1"}, ConfigzURL: refusedURL,
		ConfigzFallbackURL: srv.URL + "/configz", KubeProxyAddress: scrapetest.NoAddress, ProbeTimeout: 2 * time.Second, Logger: logger})
	st := g.Gather(context.Background())
	if st.KubeProxyConfigState != ConfigRead || st.KubeProxyConfig.DetectLocal == nil ||
		st.KubeProxyConfig.DetectLocal.InterfaceNamePrefix != "cali" {
		t.Fatalf("fallback: state %q, config %+v (%v)", st.KubeProxyConfigState, st.KubeProxyConfig.DetectLocal, st.KubeProxyConfigErr)
	}
	up.Store(false)
	g.configz.markStale()
	if st := g.Gather(context.Background()); st.KubeProxyConfigState != ConfigLastKnown || st.KubeProxyConfig.DetectLocal == nil {
		t.Errorf("unreadable after a read: state %q, detector %+v", st.KubeProxyConfigState, st.KubeProxyConfig.DetectLocal)
	}

	g = NewGatherer(GathererConfig{View: view, Addrs: scrapetest.Addrs{"127.0.0.1"}, ConfigzURL: srv.URL + "/configz",
		KubeProxyAddress: scrapetest.NoAddress, ProbeTimeout: 2 * time.Second, Logger: logger})
	st = g.Gather(context.Background())
	if st.KubeProxyConfigState != ConfigDefaults || st.KubeProxyConfig.DetectLocal != nil {
		t.Errorf("never read: state %q, detector %+v", st.KubeProxyConfigState, st.KubeProxyConfig.DetectLocal)
	}
}
