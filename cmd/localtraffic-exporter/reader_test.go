package main

import (
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/localtraffic/localtraffic-exporter/nodeprobe/ciliumsvc"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/kernelrules"
	"github.com/localtraffic/localtraffic-exporter/scrape"
)

// TestRulesReaderPick: main picks the dataplane reader, and the dataplane the gatherer is told, from the flags:
// Cilium's service table where --dataplane.cilium-socket is set, kube-proxy's rules otherwise, none where
// nothing is read.
func TestRulesReaderPick(t *testing.T) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		args      []string
		reader    string
		dataplane scrape.DataplaneKind
	}{
		{nil, fmt.Sprintf("%T", &kernelrules.Dataplane{}), ""},
		{[]string{"--rules.mode", "none"}, "<nil>", ""},
		{[]string{"--dataplane", "replacement"}, "<nil>", scrape.DataplaneReplacement},
		{[]string{"--dataplane.cilium-socket", ciliumsvc.DefaultSocket}, fmt.Sprintf("%T", &ciliumsvc.Reader{}), scrape.DataplaneCilium},
		{[]string{"--dataplane.cilium-socket", ciliumsvc.DefaultSocket, "--dataplane", "replacement"}, fmt.Sprintf("%T", &ciliumsvc.Reader{}), scrape.DataplaneCilium},
		{[]string{"--dataplane.cilium-socket", ciliumsvc.DefaultSocket, "--rules.mode", "none"}, fmt.Sprintf("%T", &ciliumsvc.Reader{}), scrape.DataplaneCilium},
	} {
		opts, err := parseOptions(append([]string{"--node-name", "n"}, tc.args...), env(nil))
		if err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		r := newRulesReader(opts, logger)
		got := fmt.Sprintf("%T", r)
		if r == nil {
			got = "<nil>"
		}
		if got != tc.reader || dataplaneOf(opts) != tc.dataplane {
			t.Errorf("%q: reader %s, dataplane %q; want %s, %q", tc.args, got, dataplaneOf(opts), tc.reader, tc.dataplane)
		}
	}
}
