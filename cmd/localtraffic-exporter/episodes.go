package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/localtraffic/localtraffic-exporter/exposure"
)

// episodesPath serves the node's ended exposure episodes, read-only, for the cluster's one Event writer
// (package eventwriter) to poll. Behind kube-rbac-proxy it is authorised as /metrics is: nonResourceURLs get.
const episodesPath = "/episodes"

// finishedSource is what the handler reads: the Gatherer's recorder.
type finishedSource interface {
	FinishedEpisodes(seq uint64) (episodes []exposure.Finished, oldest, last uint64)
}

// episodesHandler answers GET /episodes?after=<seq> with an exposure.Page. instance is random per process: the
// numbers start again at each start, and a reader must tell.
type episodesHandler struct {
	node, instance string
	src            finishedSource
}

// newInstanceID is a random id for this process's start.
func newInstanceID() (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("drawing the instance id: %w", err)
	}
	return hex.EncodeToString(b), nil
}

func (h *episodesHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "only GET", http.StatusMethodNotAllowed)
		return
	}
	var after uint64
	if s := r.URL.Query().Get("after"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			http.Error(w, fmt.Sprintf("bad after %q: want a sequence number", s), http.StatusBadRequest)
			return
		}
		after = n
	}
	eps, oldest, last := h.src.FinishedEpisodes(after)
	if eps == nil {
		eps = []exposure.Finished{}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(exposure.Page{Instance: h.instance, Node: h.node, Oldest: oldest, Last: last, Episodes: eps})
}
