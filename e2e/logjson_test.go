package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
	"github.com/localtraffic/localtraffic-exporter/e2e/netns"
)

// cuttableProxy forwards TCP connections from a listener inside a node's namespace to the apiserver. cut drops
// every connection and refuses new ones (the listener closes: connection refused) until restore: an apiserver
// hiccup as the exporter sees it.
type cuttableProxy struct {
	ns, addr, upstream string
	mu                 sync.Mutex
	l                  net.Listener
	conns              map[net.Conn]bool
	accepted           int
}

func startCuttableProxy(t *testing.T, ns, upstream string) *cuttableProxy {
	t.Helper()
	p := &cuttableProxy{ns: ns, upstream: upstream, conns: map[net.Conn]bool{}}
	l, err := netns.Listen(ns, "127.0.0.1:0")
	if err != nil {
		fatalf(t, "proxy listen in %s: %v", ns, err)
	}
	p.addr = l.Addr().String()
	p.serve(l)
	t.Cleanup(p.cut)
	return p
}

func (p *cuttableProxy) serve(l net.Listener) {
	p.mu.Lock()
	p.l = l
	p.mu.Unlock()
	go func() {
		d := netns.Dialer{NS: p.ns}
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := d.DialContext(context.Background(), "tcp", p.upstream)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.conns[in], p.conns[out] = true, true
			p.accepted++
			p.mu.Unlock()
			go func() { _, _ = io.Copy(out, in); out.Close(); in.Close() }()
			go func() { _, _ = io.Copy(in, out); in.Close(); out.Close() }()
		}
	}()
}

// cut closes the listener and every forwarded connection.
func (p *cuttableProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.l != nil {
		p.l.Close()
		p.l = nil
	}
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

// restore listens again on the same address.
func (p *cuttableProxy) restore(t *testing.T) {
	t.Helper()
	l, err := netns.Listen(p.ns, p.addr)
	if err != nil {
		fatalf(t, "proxy re-listen on %s: %v", p.addr, err)
	}
	p.serve(l)
}

// TestJSONLogsThroughAPIServerHiccup runs the exporter on node-1 exactly as the DaemonSet does with
// --log.format=json, its kubeconfig pointing at the real apiserver through a proxy this test controls. Once
// the informers have synced, the proxy drops every connection and refuses new ones for 20 seconds, then comes
// back. client-go logs the broken watches and failed relists through klog, which the exporter routes into its
// slog handler: every stderr line must parse as a JSON object, client-go's among them, and the exporter must be
// ready again after the hiccup.
func TestJSONLogsThroughAPIServerHiccup(t *testing.T) {
	c := sharedCluster(t)
	node := c.Node("node-1")
	proxy := startCuttableProxy(t, node.NS, strings.TrimPrefix(c.APIServerURL, "https://"))
	kubeconfig := proxiedKubeconfig(t, c, "https://"+proxy.addr)

	const listen = 19746 // beside the harness's own exporter on :9746
	var stderr lockedBuffer
	p, err := cluster.StartProcess(cluster.ProcessSpec{Name: "exporter-json-" + node.Name, LogDir: t.TempDir(), NS: node.NS,
		Bin: c.Binaries().Exporter, Args: []string{"--kubeconfig=" + kubeconfig, "--node-name=" + node.Name,
			fmt.Sprintf("--web.listen-address=:%d", listen), "--log.format=json", "--log.level=debug",
			"--state.file=" + filepath.Join(t.TempDir(), "state.json")},
		Stdout: io.Discard, Stderr: &stderr})
	if err != nil {
		fatalln(t, err)
	}
	stop := func() { p.Stop(0) } // killed at once: what the test reads was written before

	t.Cleanup(stop)

	ready := func() error {
		client := &http.Client{Transport: &http.Transport{DialContext: netns.Dialer{NS: node.NS}.DialContext, DisableKeepAlives: true}, Timeout: 5 * time.Second}
		resp, err := client.Get(fmt.Sprintf("http://%s:%d/readyz", node.IP, listen))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			return fmt.Errorf("/readyz %d: %s", resp.StatusCode, b)
		}
		return nil
	}
	eventually(t, time.Minute, "the exporter behind the proxy is ready", ready)

	before := len(stderr.String())
	proxy.cut()
	hiccup := time.Now()
	// client-go's reflectors notice the broken watches and fail to relist (klog lines with a "reflector" key).
	deadline := hiccup.Add(time.Minute)
	for !strings.Contains(stderr.String()[before:], `"reflector"`) {
		if time.Now().After(deadline) {
			fatalf(t, "client-go logged nothing about the cut connections in 1m; stderr since the cut:\n%s", stderr.String()[before:])
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(time.Until(hiccup.Add(20 * time.Second)))
	proxy.mu.Lock()
	acceptedBefore := proxy.accepted
	proxy.mu.Unlock()
	proxy.restore(t)
	// client-go reconnects (its reflectors relist and watch again through the proxy) and the exporter is ready.
	eventually(t, 2*time.Minute, "the exporter reconnects to the apiserver after the hiccup", func() error {
		proxy.mu.Lock()
		defer proxy.mu.Unlock()
		if proxy.accepted == acceptedBefore {
			return fmt.Errorf("no new connection through the proxy yet")
		}
		return nil
	})
	eventually(t, 2*time.Minute, "the exporter is ready again after the hiccup", ready)
	// Give the reflectors' relists and new watches time to log their recovery too.
	time.Sleep(3 * time.Second)
	stop()

	out := stderr.String()
	lines, klogLines, shown := 0, 0, 0
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 0, 1<<20), 1<<20)
	for sc.Scan() {
		lines++
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			errorf(t, "stderr line %d is not JSON (%v): %s", lines, err, sc.Text())
			continue
		}
		if _, ok := rec["msg"]; !ok {
			errorf(t, "stderr line %d has no msg: %s", lines, sc.Text())
		}
		if _, ok := rec["reflector"]; ok || rec["msg"] == "Failed to watch" {
			klogLines++
			if shown < 4 && strings.Contains(out[before:], sc.Text()) {
				shown++
				t.Logf("client-go after the cut: %s", sc.Text())
			}
		}
		if lvl, _ := rec["level"].(string); lvl == "ERROR" || lvl == "WARN" {
			t.Logf("%s", sc.Text())
		}
	}
	if klogLines == 0 {
		errorf(t, "no client-go line among %d stderr lines", lines)
	}
	proxy.mu.Lock()
	accepted := proxy.accepted
	proxy.mu.Unlock()
	t.Logf("%d stderr lines, all JSON; %d from client-go's reflectors; %d connections through the proxy", lines, klogLines, accepted)
}

// proxiedKubeconfig is the exporter ServiceAccount's kubeconfig with its server replaced.
func proxiedKubeconfig(t *testing.T, c *cluster.Cluster, server string) string {
	t.Helper()
	orig, err := c.ExporterKubeconfig(testContext(t))
	if err != nil {
		fatalln(t, err)
	}
	data, err := os.ReadFile(orig)
	if err != nil {
		fatalln(t, err)
	}
	if !bytes.Contains(data, []byte(c.APIServerURL)) {
		fatalf(t, "kubeconfig %s does not name %s", orig, c.APIServerURL)
	}
	path := filepath.Join(t.TempDir(), "proxied.kubeconfig")
	if err := os.WriteFile(path, bytes.ReplaceAll(data, []byte(c.APIServerURL), []byte(server)), 0o600); err != nil {
		fatalln(t, err)
	}
	return path
}
