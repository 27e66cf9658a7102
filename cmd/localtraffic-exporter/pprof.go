package main

import (
	"net/http"
	"net/http/pprof"
)

// mountPprof serves Go's profiles under /debug/pprof/ (--web.enable-pprof): where the exporter's CPU goes on a
// real node, its own Go code against the rule dumps it runs, is then a `go tool pprof` away. The handlers are
// mounted on the exporter's own mux, behind the same listener and web config as /metrics; net/http/pprof's
// registration on http.DefaultServeMux is never served.
func mountPprof(mux *http.ServeMux) {
	mux.HandleFunc("/debug/pprof/", pprof.Index) // the index and every named profile: heap, goroutine, allocs …
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}
