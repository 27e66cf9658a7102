package arrivals

import "net/netip"

// UDP has no "new connection": every datagram is an attempt, and a load balancer that tracks flows (a
// source address and port) keeps sending a flow to the node it first chose, on several clouds even after the
// node's health check starts failing, until the flow goes idle. Datagrams that keep arriving at a node that
// dropped its endpoints are then one of two things with two different fixes: flows the load balancer pinned
// before the check failed (its flow idle timeout or connection draining), or new flows it still sends here
// (it does not honour the check). The meter tells them apart by remembering the recent flows of each UDP
// destination: DestCount.LastNewFlow is the latest datagram that started one.
//
// maxFlows bounds the flows remembered per UDP destination. A flow idle for the quiet period is over (load
// balancers' UDP flow timeouts are of that order: two minutes on AWS NLB, four by default on Azure); a new
// one evicts the flow seen longest ago, which, should it come back, counts as new: with more flows than
// that, every datagram may look new, and the verdict falls back to a load balancer that ignores the check.
const maxFlows = 16

type udpFlow struct {
	src         netip.AddrPort
	first, last int64
}

// destFlows is one UDP destination's recent flows.
type destFlows struct {
	list    []udpFlow
	lastNew int64 // the latest datagram that started a flow
}

// add records a datagram of p at at; idle ends a flow. Before looking+idle a flow not seen yet may have
// begun before the meter looked (an exporter restart, a destination watched anew): it is remembered, not new.
func (f *destFlows) add(p packet, at, idle, looking int64) {
	src := netip.AddrPortFrom(p.src, p.sport)
	oldest := -1
	for i := range f.list {
		fl := &f.list[i]
		if fl.src == src {
			if at-fl.last < idle {
				fl.last = max(fl.last, at)
				return
			}
			*fl = udpFlow{src: src, first: at, last: at} // idle too long: the load balancer chooses again
			f.lastNew = max(f.lastNew, at)
			return
		}
		if oldest < 0 || fl.last < f.list[oldest].last {
			oldest = i
		}
	}
	if at-looking >= idle {
		f.lastNew = max(f.lastNew, at)
	}
	if len(f.list) < maxFlows {
		f.list = append(f.list, udpFlow{src: src, first: at, last: at})
		return
	}
	f.list[oldest] = udpFlow{src: src, first: at, last: at}
}

// countFlow records a UDP datagram at destination di.
func (t *tally) countFlow(di int, p packet, at int64) {
	if p.proto != UDP {
		return
	}
	d := &t.dests[di]
	if d.flows == nil {
		d.flows = &destFlows{} // at the first datagram: a destination nobody reaches costs a pointer
	}
	d.flows.add(p, at, int64(t.cfg.QuietPeriod), max(t.clk.startNs, d.watchedSince))
}
