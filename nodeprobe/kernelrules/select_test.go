package kernelrules

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// TestSelectorFollowsModeSwitch: kube-proxy restarted in another mode is followed. The selector keeps the
// mode it detected for DetectTTL (no /proxyMode question per read), then asks again and reads with the
// other mode's reader; a failed read forgets the detection at once.
func TestSelectorFollowsModeSwitch(t *testing.T) {
	// A node holding both modes' rules (kube-proxy's cleanup of the old mode is not relied on): only
	// /proxyMode tells them apart.
	f := iptablesNode(t, BackendNFT)
	for k, v := range nftNode(t).out {
		f.out[k] = v
	}
	var mu sync.Mutex
	answer, asked := "iptables", 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		asked++
		fmt.Fprint(w, answer)
	}))
	t.Cleanup(srv.Close)
	say := func(mode string) {
		mu.Lock()
		answer = mode
		mu.Unlock()
	}
	now := time.Unix(1700000000, 0)
	r := NewReader(Options{ProxyModeURL: srv.URL, Runner: f, LookPath: anyPath, CacheTTL: -1, DetectTTL: time.Minute,
		Now: func() time.Time { return now }})
	read := func(step string, mode Mode, backend Backend) {
		t.Helper()
		snap, err := r.Read(context.Background())
		if err != nil || snap.Mode != mode || snap.Backend != backend {
			t.Fatalf("%s: snapshot %+v, err %v; want mode %s, backend %q", step, snap, err, mode, backend)
		}
	}
	read("first read", ModeIPTables, BackendNFT)
	say("nftables")
	now = now.Add(30 * time.Second)
	read("within DetectTTL", ModeIPTables, BackendNFT)
	if asked != 1 {
		t.Errorf("/proxyMode asked %d times within DetectTTL, want 1", asked)
	}
	now = now.Add(31 * time.Second)
	read("past DetectTTL", ModeNFTables, "")
	if asked != 2 {
		t.Errorf("/proxyMode asked %d times, want 2", asked)
	}
	// A failed read forgets the mode: the next read asks again, within DetectTTL.
	f.mu.Lock()
	f.fail["nft -j list table ip kube-proxy"] = &CommandError{Cmd: "nft", Err: errors.New("exit status 1"), Stderr: "Error: Permission denied"}
	f.mu.Unlock()
	if _, err := r.Read(context.Background()); err == nil {
		t.Fatal("a failing nft listing read without error")
	}
	f.mu.Lock()
	delete(f.fail, "nft -j list table ip kube-proxy")
	f.mu.Unlock()
	say("iptables")
	read("after a failed read", ModeIPTables, BackendNFT)
	if asked != 3 {
		t.Errorf("/proxyMode asked %d times, want 3", asked)
	}
}
