package rules

import "testing"

func TestDropCounter(t *testing.T) {
	var c DropCounter
	a := ServicePort{Namespace: "ns", Name: "a", Port: "http", Protocol: "TCP"}
	b := ServicePort{Namespace: "ns", Name: "b", Protocol: "TCP"}
	steps := []struct {
		sp        ServicePort
		raw, want uint64
	}{
		{a, 5, 5},   // first sight: what the rule counted so far
		{a, 9, 9},   // +4
		{b, 3, 3},   // independent port
		{a, 2, 11},  // kube-proxy rewrote the rule: reset, +2
		{a, 2, 11},  // no traffic
		{a, 10, 19}, // +8
		{b, 0, 3},   // reset to zero
	}
	for i, s := range steps {
		if got := c.Observe(s.sp, s.raw); got != s.want {
			t.Errorf("step %d: Observe(%s, %d) = %d, want %d", i, s.sp, s.raw, got, s.want)
		}
	}
	c.Retain(func(sp ServicePort) bool { return sp == b })
	if got := c.Observe(a, 1); got != 1 {
		t.Errorf("after Retain dropped a: %d, want a fresh 1", got)
	}
	if got := c.Observe(b, 1); got != 4 {
		t.Errorf("b kept: %d, want 4", got)
	}
}
