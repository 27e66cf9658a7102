package nodeagent

import (
	"net/netip"
	"testing"
)

func TestAllocatorEveryFamily(t *testing.T) {
	al := newAllocator([]netip.Prefix{netip.MustParsePrefix("10.244.2.0/24"), netip.MustParsePrefix("fd00:10:244:2::/64")})
	off, addrs, err := al.take()
	if err != nil {
		t.Fatal(err)
	}
	if off != firstOffset || len(addrs) != 2 || addrs[0] != "10.244.2.128" || addrs[1] != "fd00:10:244:2::80" {
		t.Fatalf("first allocation: offset %d, %v", off, addrs)
	}
	_, second, _ := al.take()
	if second[0] != "10.244.2.129" {
		t.Fatalf("second allocation %v, want 10.244.2.129", second)
	}
	// A released address is not handed out again before the others.
	al.release(off)
	_, third, _ := al.take()
	if third[0] != "10.244.2.130" {
		t.Fatalf("third allocation %v, want 10.244.2.130 (no immediate reuse)", third)
	}
}

func TestAllocatorExhaustedAndWraps(t *testing.T) {
	al := newAllocator([]netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")})
	var offs []int
	for range lastOffset - firstOffset + 1 {
		off, _, err := al.take()
		if err != nil {
			t.Fatal(err)
		}
		offs = append(offs, off)
	}
	if _, _, err := al.take(); err == nil {
		t.Fatal("allocation past the range succeeded")
	}
	al.release(offs[5])
	off, addrs, err := al.take()
	if err != nil || off != offs[5] || addrs[0] != "10.244.1.133" {
		t.Fatalf("after release: %d %v %v", off, addrs, err)
	}
}

func TestNthAddrOutsidePrefix(t *testing.T) {
	if _, err := nthAddr(netip.MustParsePrefix("10.244.1.0/25"), 200); err == nil {
		t.Fatal("host 200 of a /25 accepted")
	}
	if a, err := nthAddr(netip.MustParsePrefix("10.244.2.0/23"), 300); err != nil || a.String() != "10.244.3.44" {
		t.Fatalf("host 300 of a /23: %v %v", a, err)
	}
}
