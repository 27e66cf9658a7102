// Package kernelrules reads what kube-proxy programmed on this node — iptables (legacy
// or nft backend) or nftables mode — and says, per IP family and Service port, whether
// the node drops external traffic for lack of local endpoints, and for which
// destinations (the NodePort, each load balancer ingress IP and externalIP). It never writes a rule, a
// chain, a table or a lock: it runs `iptables-save` and `nft list`, reads
// /proc/net/ip{,6}_tables_names (in-process with ExecRunner, `cat` through other
// Runners, e.g. NetnsRunner), and asks the kernel read-only questions for its
// change signals (netlink NFT_MSG_GETGEN and GETRULE, getsockopt
// IPT_SO_GET_INFO and GET_ENTRIES; see Steady-state reads).
//
// # Use
//
//	r := kernelrules.NewReader(kernelrules.Options{ProxyModeURL: "http://127.0.0.1:10249/proxyMode", Logger: log})
//	snap, err := r.Read(ctx)
//	switch {
//	case errors.Is(err, kernelrules.ErrUnsupported): // snap.Mode says which (ipvs): use the API view
//	case err != nil:                           // rules unreadable: use the API view, report the failure
//	default:
//		sp := kernelrules.ServicePort{Namespace: "ns", Name: "svc", Port: "http", Protocol: "TCP"}
//		for _, fam := range snap.Families {
//			st := snap.Family(sp, fam) // st.Drop, st.Drops, st.LocalEndpoints ...
//		}
//	}
//
// # Mode
//
// Options.Mode ModeIPTables or ModeNFTables reads that mode. ModeAuto (the
// default) asks kube-proxy's /proxyMode (plain text "iptables", "nftables" or
// "ipvs"); without an answer it looks at the tables (docs/kube-proxy.md, "/proxyMode
// and metrics"). Both iptables and nftables rules present is ErrAmbiguous. A detected
// mode and backend are kept for Options.DetectTTL (5 min) and forgotten after any
// failed read.
//
// IPVS has no drop rule to read: Read returns a Snapshot with Mode ModeIPVS and an
// error wrapping ErrUnsupported, logging one warning per Reader. Never read that as
// "no blackhole".
//
// # iptables mode
//
// The backend is chosen as the kube-proxy image's iptables-wrapper does (kubelet's hint and canary chains,
// else the backend with more KUBE- rules; nft on a tie). Each read then runs at most one
// `{ip,ip6}tables-<backend>-save -c -t <table>` for nat and filter per family (nat only when it changed, see
// Steady-state reads): never one command per chain. With the legacy backend only tables listed in
// /proc/net/ip{,6}_tables_names are saved, because saving a missing legacy table makes the kernel create
// it. A family is read when its nat table has KUBE-SERVICES; an IPv6 save failing with "not
// supported"/"does not exist" means no IPv6 (not an error). Output that does not parse (truncated, garbled)
// is an error, never "no rule"; so is finding KUBE-SERVICES in no family (ErrNoRules).
//
// Chains are mapped to Service ports by kube-proxy's hash (IPTablesChainHash), never by comments; filter
// rules, which carry only a comment, are hashed from it and the rule's -p. Every layout kube-proxy has
// written is read: since 1.25 (KUBE-EXTERNAL-SERVICES DROPs, one per destination), 1.24 (KUBE-SVL holding
// KUBE-MARK-DROP) and up to 1.23 (KUBE-XLB), plus the REJECT of a port without endpoints anywhere and the
// KUBE-PROXY-FIREWALL drops of loadBalancerSourceRanges, whose counters are added to the address's DropRule.
// LocalEndpoints counts the distinct KUBE-SEP-* targets of KUBE-SVL (or KUBE-XLB), named by their comment
// or, without one, by the endpoint chain's hash (Endpoint.Is). The layouts, hashes and argument orders:
// docs/kube-proxy.md, "iptables mode".
//
// # nftables mode
//
// `nft -j list table ip kube-proxy` and `... ip6 ...`; a missing table means that family is not
// programmed. Drop and Reject come from the no-endpoint-nodeports and no-endpoint-services maps, a drop
// element matched to its Service port by its key (never its comment, which kube-proxy cuts to 128 bytes)
// through service-nodeports / service-ips to the port's external-* chain; a drop on the cluster IP is
// internalTrafficPolicy=Local and is not one. LocalEndpoints are the distinct endpoints the local-* chain
// sends traffic to, in every layout kube-proxy v1.37 writes; Endpoints holds them. DropPackets is 0:
// kube-proxy puts no counters on these elements (element counters are read if present: Counted). The maps,
// chain names and endpoint layouts: docs/kube-proxy.md, "nftables mode". Fixtures testdata/real-v1.37.2-*
// were dumped from a real kube-proxy v1.37.2 (e2e/cmd/dumprules); testdata/nft-*.json is our generator's
// older layout.
//
// # Bounded commands
//
// Every command runs with the Read's context (the scrape's deadline), also the
// `iptables-<backend> --version` query made once per backend detection (through the
// Runner; informational only). ExecRunner caps stdout at 64 MiB and stderr at
// 1 MiB (MaxOutput, MaxStderr): past the cap the command is killed and Run fails
// with ErrOutputTooLarge — a truncated ruleset is never parsed. WaitDelay (500 ms)
// bounds the wait for a killed command's pipes, which a child it started may hold
// open: a command ends at most that long after the Read's context. /proc reads (ReadFile) are capped the same way.
//
// # One pipeline
//
// A Read goes one way: detect (mode and backend; rarely, see Mode) → read (per
// table and family, a big table only when its change signal moved) → parse →
// snapshot. In front sits a single-flight cache (sharedRead, which knows
// nothing of rules): at most one read is in flight per Reader; concurrent Read
// calls wait for it and get the same *Snapshot (immutable: do not modify). A
// snapshot (also the IPVS one) is reused for Options.CacheTTL (2 s); failures
// are not cached. If the reading caller's context ends the read, waiting callers
// with live contexts start a new one. A failed read forgets the detection and
// every kept table.
//
// # Steady-state reads
//
// Most of the rules (nat's KUBE-SVC/SEP chains, nftables mode's table) change
// only when kube-proxy syncs; the ≥1.25 drops and their counters live in the
// small filter table. So a read keeps each parsed nat table (nftables mode:
// each family's kube-proxy table) together with a change signal read just
// before it was saved, and saves it again only when the signal moved: a change
// is picked up on the very next read. The signals are read in the network
// namespace the Runner's commands run in (ChangeSignals: ExecRunner reads this
// process's — the host's, where kube-proxy writes — and NetnsRunner enters its
// namespace), never guessed: a Runner without them, or a signal that cannot be
// read, means every table is saved every read (logged once).
//
//   - nft backend and nftables mode: the nf_tables ruleset generation
//     (NFT_MSG_GETGEN over netlink), which every committed nf_tables
//     transaction moves (iptables-nft-restore, nft -f) and packet counters do
//     not. Exact.
//   - nft backend, filter: iptables-nft-save fetches every table's rules, so
//     saving filter alone costs nearly a full save. While the generation holds,
//     filter's parse is kept too and the counters of KUBE-EXTERNAL-SERVICES (the
//     only counters a state carries) are dumped over netlink (NFT_MSG_GETRULE
//     for that chain, rules in chain order, the generation read before and
//     after: a move in between, or a rule count that differs from the kept
//     parse, saves filter).
//   - legacy backend: there is no generation. nat is kept while its
//     IPT_SO_GET_INFO answer (entry count, blob size, hook entries, underflows;
//     microseconds) is unchanged, and read again at most every
//     Options.LegacyVerify (5 min) even when it is: a change that keeps the
//     entry count and the size (two rules rewritten to two of the same size in
//     one sync) is therefore seen within LegacyVerify, every other nat change
//     on the next read; filter — the drops — is saved every read.
//     LegacyVerify < 0 reads nat every read (exact). Only tables listed in
//     /proc/net/ip{,6}_tables_names are asked (asking creates a missing one).
//     (The verification used to hash the IPT_SO_GET_ENTRIES blob: the kernel
//     hands out the whole table or nothing, 62 MB at 10,000 Services, over the
//     exporter's memory budget; the streamed save below costs a 64 KiB buffer.)
//   - ≤1.24 layouts drop in nat with counters that move without a rule change,
//     and nftables elements with counters likewise: such tables are never kept.
//
// These kernel reads are bounded like commands: the netlink exchanges
// (github.com/mdlayher/netlink, one connection per signal read) end at the
// Read's deadline, at most 2 s after the connection opened, and at once when
// the Read is cancelled.
//
// One family's nat and filter must come from the same kube-proxy sync: a kept
// nat (the old local endpoints) beside a freshly saved filter (the new drop)
// would be a snapshot no kube-proxy ever wrote. After reading a family the
// reader reads its change signal again; when it moved during the read the
// family is read again (at most three times). With the nft backend a restore is
// one nf_tables transaction, so this is exact; legacy restores commit table by
// table (filter, then nat), so a read that falls between the two commits can
// still mix them for one read.
//
// # Streamed saves
//
// A Runner that implements Streamer (ExecRunner and NetnsRunner do) hands each
// save to the parser while the command writes it, a line at a time through a
// 64 KiB buffer: a nat table of 100,000 rules is parsed without ever being held
// whole (peak heap of one nat read at 10,000 Services 1.6 MiB, against 32 MiB
// with the output buffered first; docs/performance.md). Other Runners are read
// whole, then parsed.
//
// # Keys
//
// ServicePort.Port is the port's name ("" when unnamed) and Protocol the API's
// "TCP"/"UDP"/"SCTP" (any case; required: it is part of kube-proxy's hash). Port
// returns the zero PortState for a port with no rule at all. Snapshot.Len counts the
// Service ports with any state. NewSnapshot builds a snapshot from known states for
// tests of consumers.
//
// # Families and destinations
//
// kube-proxy runs one proxier per IP family, and each writes its own rules
// (iptables and ip6tables, or tables ip and ip6 kube-proxy): one node can forward a
// Service port's IPv4 traffic and drop its IPv6 traffic. The snapshot keeps the
// families apart. Family(sp, fam) is one family's state; HasFamily(fam) says whether
// that family's rules were found and read (a zero PortState from a family that was
// not read says nothing). HasFamily does not say a Service uses the family: kube-proxy
// v1.37.2 programs an IPv6 table (ip6tables KUBE-SERVICES, table ip6 kube-proxy) even
// on a single-stack IPv4 node when the kernel has IPv6 (seen in the real fixtures);
// a Service's families come from its spec.ipFamilies and its EndpointSlices.
// Port(sp) is a merged view kept for older callers:
// Programmed, Drop, Reject if any family says so; LocalEndpoints the maximum;
// DropPackets the sum; Drops all families' rules.
//
// PortState.Drops lists the drop rules one by one, the NodePort rule (Address "")
// first, then by address (canonical, netip.Addr.String), each with its own counter
// where the layout has one (Counted). The ≤1.24 layouts drop every destination of the
// port in one nat rule: that is one DropRule with AllDestinations set, Address "" and
// Port 0, whose counter counts all destinations together. DropPackets is the sum of
// the rules' counters.
//
// DropPackets is a raw rule counter
// that resets whenever kube-proxy rewrites the rule (every sync in ≥1.25's filter
// table): a monotonic metric must be kept by the caller (the rules collector does that).
//
// Drop is false when there is nothing external to drop (≥1.25 and nftables: the
// drop rules are per external address): a Local Service port with
// no NodePort, no LoadBalancer ingress IP and no externalIPs has no drop rule even
// without local endpoints.
package kernelrules
