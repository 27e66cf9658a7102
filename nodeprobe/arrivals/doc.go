// Package arrivals observes, on the wire and read-only, the new connection attempts that reach this node for
// the destinations it is asked about (NodePorts per IP family, load balancer ingress IPs, externalIPs; TCP,
// UDP, SCTP) and the probes that reach its health check node ports: the evidence for "something sends this
// node the Service's traffic", the same in iptables (legacy and nft), nftables and IPVS mode, without
// kube-proxy's counters and without writing anything on the node.
//
// # Use
//
//	m := arrivals.New(arrivals.Config{Logger: log}) // once; in the host network namespace (hostNetwork)
//	defer m.Close()
//
//	// every scrape, in the gather step:
//	err := m.Watch(arrivals.Watch{
//		NodeAddrs:    nodeAddrs,          // where NodePorts and health check node ports are counted
//		Dests:        dests,              // arrivals.NodeDest(arrivals.TCP, false, 30080), {TCP, lbIP, 443}, ...
//		HealthChecks: checks,             // arrivals.NodeDest(arrivals.TCP, false, hcnp) per family
//		Internal:     podCIDRs,           // sources that are not external
//	})                                    // cheap when nothing changed; ErrInvalidWatch for bad input
//	snap := m.Snapshot()                  // a copy; never waits for packets
//	if snap.Status != arrivals.StatusOK { /* export the state: nothing is observed */ }
//	// Dropped, Shed or Sampled above zero in a family of snap.Families: its counts are lower bounds
//	c, ok := snap.Dest(arrivals.NodeDest(arrivals.TCP, false, 30080)) // c.Attempts, c.LastSeen, c.ActiveSince
//
// # Why a packet socket
//
// What reaches a node could be observed in other ways, and each fails one of the requirements:
//   - kube-proxy's rule counters: none in nftables mode, reset on every sync in iptables mode, none in IPVS
//     mode; and loadBalancerSourceRanges move the drops to a chain the counters do not cover (what kube-proxy
//     writes in each mode: docs/kube-proxy.md).
//   - a rule, nflog target or counter object of our own: the exporter writes nothing on the node.
//   - conntrack events (NFNLGRP_CONNTRACK_NEW): a conntrack entry is reported when it is confirmed, and a
//     connection whose first packet kube-proxy drops is never confirmed: the blackholed traffic, exactly
//     what must be seen, emits no event.
//   - eBPF programs (kprobes, tracepoints, eBPF socket filters): CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN,
//     which the DaemonSet does not have; and their attach points differ between kernels.
//   - an AF_PACKET socket with a classic BPF filter needs CAP_NET_RAW, which the DaemonSet already has for
//     iptables-legacy-save; it writes nothing, its filter runs in the kernel, and it sits below netfilter
//     and IPVS, so it sees every dataplane alike. This package uses it.
//
// golang.org/x/net/bpf assembles the filter and golang.org/x/sys/unix lays out the TPACKET_V3 ring;
// github.com/mdlayher/packet (v1.2.0) does not fit: it binds one interface, reads a packet per recvfrom
// with no ring, and drops the packet type.
//
// # What is counted, once
//
// The meter opens two sockets, AF_PACKET SOCK_DGRAM, bound to ETH_P_IP and ETH_P_IPV6 on every interface
// (sll_ifindex 0). A socket bound to one ethertype is a protocol handler in the kernel's ptype_base list,
// the list ip_rcv and ipv6_rcv are in. __netif_receive_skb_core delivers to that list once per packet,
// after the taps (tcpdump's ETH_P_ALL sockets), tc ingress, VLAN untagging and the rx_handlers (bridge,
// bond, team, macvlan, ipvlan, openvswitch) have passed the frame to the device IP receives it on. So:
//   - a frame that crosses a bridge port, a bond slave or a VLAN is delivered once, on the device IP sees,
//     not once per device it crossed;
//   - a transmitted packet is never delivered to a protocol-bound socket (dev_queue_xmit_nit serves the
//     ETH_P_ALL taps only): nothing the node sends is seen, nor what it forwards, DNATed or not, through
//     a bridge and a veth to a pod (which receives it in its own network namespace). Nor does the socket
//     cost anything on transmit, where an ETH_P_ALL socket makes the kernel clone every outgoing packet;
//   - the meter sees a packet before IP's PREROUTING hooks (kube-proxy's DNAT in iptables and nftables
//     mode), before INPUT and FORWARD (kube-proxy's drops) and before IPVS (LOCAL_IN): the destination the
//     client used, whether the node then serves, forwards or drops the packet.
//
// The kernel filter (buildFilter) then keeps, of those packets:
//   - PACKET_HOST only: a frame addressed to another MAC (seen in promiscuous mode), broadcast and
//     multicast are not for this node's IP;
//   - not received on lo (LOOPBACK_IFINDEX, 1 in every namespace): what the node sends to itself (the
//     exporter's own health check probes, kubelet, a curl to its own NodePort) comes back in on lo;
//   - a TCP SYN without ACK, an SCTP packet whose first chunk is INIT (INIT is never bundled: one per
//     association attempt), every UDP datagram (UDP has no "new" without conntrack); IPv4 first fragments;
//     IPv6 packets without extension headers (a SYN does not carry them; one that does is not counted);
//   - to a watched destination: the exact address and port of a load balancer ingress IP or externalIP, or a
//     NodePort or health check node port on one of Watch.NodeAddrs.
//
// User space decodes the same fields again (decode, FuzzFilterAgreesWithDecode holds both to one answer)
// and counts the packet unless its source is in Watch.Internal (the pod CIDRs: kube-proxy short-circuits pod
// traffic to every endpoint, so it is never lost to a Local policy); those go to FamilyStats.Internal.
// Times are the kernel's receive times. kernel_linux_test.go proves each rule with real packets between
// network namespaces, IPv4 and IPv6.
//
// # Limits
//
//   - A bridged uplink with br_netfilter: Kubernetes nodes run with net.bridge.bridge-nf-call-iptables=1 (the
//     kernel's default where br_netfilter is loaded). If the node's external interface is a bridge port (br0
//     enslaving eth0), the bridge runs IP's PREROUTING hooks, kube-proxy's DNAT included, before it hands the
//     packet to IP: a connection the node serves reaches the meter with the endpoint's address and is not
//     counted. A connection the node drops for lack of a local endpoint is not DNATed and is counted, so the
//     blackhole evidence is whole; arrivals at serving nodes are undercounted there. Nodes whose uplink is
//     not a bridge port, or without br_netfilter, are not affected.
//   - XDP and tc ingress programs act before the meter; those that DNAT or redirect (Cilium, Calico's eBPF
//     dataplane) replace kube-proxy, which this exporter is about.
//   - UDP GRO, where enabled for forwarding, can merge datagrams of one flow: they are counted as one.
//   - Counts start when the meter starts, or when a destination is first watched (WatchedSince).
//
// # Bounded work
//
//   - Unrelated traffic costs a filter run (a few dozen instructions, JIT-compiled) per received IP packet
//     of a watched family, no copy and no wakeup; a family with nothing watched is not bound at all. Ports
//     and addresses are found by binary search. When the exact filter exceeds BPF_MAXINSNS (about 1,500 NodePorts
//     or IPv4 load balancer addresses, 400 IPv6 ones) or the kernel refuses it (net.core.optmem_max), a
//     coarser one checks ports only, then protocols only: the counts are the same, more packets are copied
//     (FamilyStats.Filter).
//   - Matched packets are copied, 74 bytes at most, into a TPACKET_V3 ring per family (Config.Blocks ×
//     BlockSize, 1 MiB by default: kernel memory mapped into the process, not Go heap, resident from the
//     mmap, so mapped when the family is first watched: a single-stack node maps one). A full ring drops
//     in the kernel, which counts it (PACKET_STATISTICS): FamilyStats.Dropped.
//   - The reader counts at most Config.MaxPacketRate packets per second per family; blocks beyond it are
//     given back uncounted: FamilyStats.Shed. It does not allocate per packet. While it sheds, the kernel
//     filter passes the packets of a sample of the source addresses, each source's in full (sample.go):
//     FamilyStats.Sampling and Sampled.
//   - Snapshot copies under a lock the reader holds for 128 packets at most. The probers remembered per
//     health check are bounded (Config.MaxSources, the least recently seen forgotten).
//
// Costs measured: docs/performance.md, "Arrivals meter".
//
// # Failure states
//
// New never fails. Without CAP_NET_RAW the meter is StatusPermissionDenied, on any other error opening or
// reading its sockets StatusFailed (Snapshot.Err says why): nothing is observed, and the caller must export
// that, never "no arrivals". Dropped or Shed above zero (in a family of Snapshot.Families) make every count a
// lower bound.
package arrivals
