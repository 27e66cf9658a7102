package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/localtraffic/localtraffic-exporter/exposure"
)

// ringSource is a recorder's ring of n episodes, numbered from 1.
type ringSource struct {
	n     uint64
	asked []uint64
}

func (s *ringSource) FinishedEpisodes(seq uint64) ([]exposure.Finished, uint64, uint64) {
	s.asked = append(s.asked, seq)
	var out []exposure.Finished
	for i := seq + 1; i <= s.n; i++ {
		out = append(out, exposure.Finished{Seq: i, Cause: exposure.CauseRollout, Start: time.Unix(int64(i), 0)})
	}
	return out, min(1, s.n), s.n
}

// /episodes serves the episodes after the number asked, with the node and the process's instance id; a bad
// number is a 400, a write method a 405.
func TestEpisodesHandler(t *testing.T) {
	src := &ringSource{n: 3}
	h := &episodesHandler{node: "node-a", instance: "abc", src: src}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/episodes?after=1", nil))
	var p exposure.Page
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || rec.Code != http.StatusOK {
		t.Fatalf("GET: %d %s (%v)", rec.Code, rec.Body, err)
	}
	if p.Node != "node-a" || p.Instance != "abc" || p.Oldest != 1 || p.Last != 3 || len(p.Episodes) != 2 || p.Episodes[0].Seq != 2 {
		t.Errorf("page = %+v", p)
	}
	for _, c := range []struct {
		method, target string
		want           int
	}{
		{http.MethodGet, "/episodes?after=-1", http.StatusBadRequest},
		{http.MethodGet, "/episodes?after=x", http.StatusBadRequest},
		{http.MethodPost, "/episodes", http.StatusMethodNotAllowed},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(c.method, c.target, nil))
		if rec.Code != c.want {
			t.Errorf("%s %s = %d, want %d", c.method, c.target, rec.Code, c.want)
		}
	}
	if len(src.asked) != 1 || src.asked[0] != 1 {
		t.Errorf("source asked %v, want once after 1", src.asked)
	}
}

// Each process start draws its own instance id.
func TestInstanceIDsDiffer(t *testing.T) {
	a, err1 := newInstanceID()
	b, err2 := newInstanceID()
	if err1 != nil || err2 != nil || a == b || len(a) != 16 {
		t.Errorf("ids %q %q (%v %v)", a, b, err1, err2)
	}
}
