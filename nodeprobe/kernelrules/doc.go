// Package kernelrules reads what kube-proxy programmed on this node — iptables (legacy
// or nft backend) or nftables mode — and says, per IP family and Service port, whether
// the node drops external traffic for lack of local endpoints, and for which
// destinations (the NodePort, each load balancer ingress IP and externalIP). It never writes a rule, a
// chain, a table or a lock: it runs `iptables-save` and `nft list`, reads
// /proc/net/ip{,6}_tables_names (in-process with ExecRunner, `cat` through other
// Runners, e.g. NetnsRunner), and asks the kernel read-only questions for its
// change signals and the objects it reads again in part (netlink
// NFT_MSG_GETGEN, GETRULE, GETCHAIN and GETSETELEM, the NFNLGRP_NFTABLES
// notifications it listens to, getsockopt IPT_SO_GET_INFO; see Steady-state
// reads, Change notifications and Reads in part).
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
// failed read, so a kube-proxy restarted in another mode is followed. Detection is
// the selector's (select.go): each mode and iptables backend is read by its own
// reader value, which detects nothing; they share the node's single flight, kept
// tables and watcher.
//
// IPVS has no drop rule to read: Read returns a Snapshot with Mode ModeIPVS and an
// error wrapping ErrUnsupported, logging one warning per Reader. Never read that as
// "no blackhole".
//
// # iptables mode
//
// The backend is chosen as the kube-proxy image's iptables-wrapper does (kubelet's hint and canary chains,
// else the backend with more KUBE- rules; nft on a tie). Each read then runs at most one
// `{ip,ip6}tables-<backend>-save -c -t <table>` for nat and filter per family (each only when it changed, see
// Steady-state reads); with the nft backend, a nat whose changes are all in Service chains lists those chains
// alone instead (Reads in part). With the legacy backend only tables listed in
// /proc/net/ip{,6}_tables_names are saved, because saving a missing legacy table makes the kernel create
// it. A family is read when its nat table has KUBE-SERVICES; an IPv6 save failing with "not
// supported"/"does not exist" means no IPv6 (not an error). Output that does not parse (truncated, garbled)
// is an error, never "no rule"; so is finding KUBE-SERVICES in no family (ErrNoRules).
//
// Chains are mapped to Service ports by kube-proxy's hash (hashKey), never by comments; filter
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
// snapshot (also the IPVS one) is reused for Options.CacheTTL (2 s) unless
// Watch reported a change since; failures are not cached. If the reading caller's context ends the read, waiting callers
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
//     not. Exact — and, since kube-proxy commits a transaction on every sync
//     (every few seconds where endpoints churn anywhere in the cluster), it
//     seldom holds on a busy node. While Watch runs, the change notifications
//     vouch instead: a kept table is used while no transaction since its save
//     changed anything its parse reads (Change notifications); in nftables
//     mode, when one did, only the objects it changed are read again (Reads
//     in part).
//   - nft backend, filter: iptables-nft-save fetches every table's rules, so
//     saving filter alone costs nearly a full save. While filter's kept parse is
//     vouched for, the counters of KUBE-EXTERNAL-SERVICES (the only counters a
//     state carries; and KUBE-PROXY-FIREWALL's when linked) are dumped over
//     netlink (NFT_MSG_GETRULE for that chain, the generation read before and
//     after) and matched to the kept parse's rules by content, not position:
//     kube-proxy refills the chain on every sync in the order it walks its
//     Services, a Go map's. Each dumped rule's content key (its expressions and
//     comment without handle, position or counter values) is learned once per
//     save — by position when the chain was not rewritten between the save and
//     the dump, else by what both spell of the rule (comment, destination
//     address and port, protocol: ChainRule) — and afterwards a key unknown to
//     the kept parse, or one missing, means filter changed: it is saved.
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
// family is read again (at most three times) — while Watch runs, only when a
// transaction in between changed something the family's parse reads (every
// table read then says what every generation in between said). A restore
// commits table by table, filter then nat: legacy restores always, and
// iptables-nft-restore too (v1.8.9 commits one nf_tables transaction per
// table it restores; seen in the notifications), so a read that falls between
// the two commits can mix them: one that shows a port dropping and sending to
// local endpoints at once is read again after nat's commit (tornPort); one
// that shows a port gaining its first local endpoint neither dropping nor
// served is not caught, for one read.
//
// # Change notifications
//
// The Reader NewReader returns is a Watcher. While Watch runs, a netlink
// socket in the Runner's network namespace (ExecRunner: this process's, the
// host's; NetnsRunner: its namespace; other Runners have none) listens to
// the nf_tables change notifications (the NFNLGRP_NFTABLES multicast group:
// every committed transaction's added and deleted tables, chains, rules, sets
// and set elements, each sent whole — a deleted rule with its expressions —
// then NEWGEN with the transaction's generation). The watcher decodes each
// message only as far as its family, table and chain or set, and judges each
// transaction at its NEWGEN: did it change, per family, the content of an
// object the parse of the mode and backend read last depends on? Those are
// (watchscope.go):
//
//   - iptables mode, nft backend: the rules of nat's KUBE-SVL-*, KUBE-XLB-*,
//     KUBE-EXT-*, KUBE-SERVICES and KUBE-NODEPORTS and of filter's
//     KUBE-EXTERNAL-SERVICES, KUBE-SERVICES and KUBE-PROXY-FIREWALL; the
//     deletion of a Service chain (KUBE-SVC/SVL/EXT/FW/XLB-<hash>: Programmed)
//     and nat KUBE-SERVICES (and IPVS mode's chains) appearing or going. Not
//     KUBE-SVC's balancing rules or the KUBE-SEP chains, which a remote
//     endpoint's churn rewrites;
//   - nftables mode: the rules of the local-* and external-* chains, the
//     elements of no-endpoint-nodeports, no-endpoint-services, service-ips,
//     service-nodeports and firewall-ips, the deletion of a Service chain or
//     of one of those maps, and table kube-proxy appearing or going;
//   - the legacy backend and IPVS mode: nothing (no nf_tables); before the
//     first read: everything.
//
// A content change is judged net of rewrites: per family, the multiset of
// (object, content) items a transaction added minus those it deleted, kept as
// one wrapping sum of 64-bit hashes and a count (watchtx.go: a chain flushed
// and refilled in another order, a map flushed and refilled, put back to zero;
// any other change leaves them non-zero but for a chance of 2⁻⁶⁴). A rule's
// content is its expressions, comment (userdata) and compat data, without its
// handle, position or counter values; an element's is everything but its
// expiration. An anonymous set a rule refers to by name (nftables mode's
// numgen map of a local chain's endpoints: a rewritten rule gets a new set,
// possibly under its old set's name) stands for its elements: those created
// in the same transaction for an added rule; for a deleted one, the content
// remembered when its rule was added, or read from a dump of the table when
// the watcher (re)started (a rule whose set is unknown counts as a change).
// Creating a Service chain is not judged by itself — kube-proxy's nftables
// proxier "adds" every chain it refills, which the kernel notifies like a
// creation — but kube-proxy jumps to every chain it creates from a chain
// whose content counts, so a new one comes with a content change; a chain
// created with nothing jumping to it (kube-proxy writes none) is seen at the
// next FullVerify. Memory is bounded: per transaction two sums per family and
// the anonymous sets it creates (at most 65,536), across transactions the
// anonymous sets relevant rules refer to (at most 131,072 per family); a
// relevant rule past either bound counts as a change.
//
// What the watcher vouches for is a view per family: the generation of the
// last relevant transaction (lastRelevant), and of the last one that rewrote a
// counter chain. A read reads the generation, waits (at most 2 s) until the
// watcher has judged every transaction up to it, and keeps a table while no
// relevant transaction came after the generation its save started at. Where
// the watcher cannot vouch — not subscribed, behind, or its scope not yet the
// read's — the generation alone vouches, as without Watch.
//
// Beside the yes/no, each relevant transaction names, per family, the objects
// whose content it changed: every relevant chain and named set keeps its own
// share of the family's sums (a chain refilled as it was nets to zero on its
// own, as the family does; an anonymous set counts in the chain of the rule
// that refers to it), and a deleted Service chain or read map is named. A table
// created or deleted, a message that did not decode, or more than 256 objects
// in one transaction (a full sync) leave the names unknown. The watcher keeps
// the names of the relevant transactions since its baseline, at most 512 per
// family (the oldest go first): a read asks what changed after the generation
// a kept table was saved at, and is told, or told that it cannot be said.
//
// Notifications lost (the socket's receive buffer overrun: ENOBUFS; the
// buffer is Options.NotifyBuffer, 64 MiB, forced past the system maximum with
// SO_RCVBUFFORCE where permitted) mean anything may have changed: the watcher
// drains what is queued, reads the generation (and the anonymous sets) again
// and makes that its new baseline, as at its start and when the scope changes
// — every transaction up to it counts as relevant, so every kept table is
// saved again by the next read, which counts it in Snapshot.Resyncs. A
// warning is logged.
//
// Watch calls changed — never concurrently, coalesced: calls that pile up
// while one runs become one — once when it starts (what changed since the
// last Read is not known), after each relevant transaction and each loss;
// where no notifications exist it polls the change signal every
// Options.PollInterval (1 s) instead: legacy, each existing nat and filter
// table's GET_INFO (a reordered rewrite keeps it; a change that keeps the
// entry count and size is seen within LegacyVerify by the reads); the nft
// backend and nftables mode without a subscription, the generation (every
// commit); a Runner without change signals, every tick. Counter growth never
// calls it. Before each call the snapshot kept for CacheTTL is dropped, and a
// read in flight begun before the change is neither kept nor shared with
// later callers: the Read a call prompts reads. Concurrent Watch calls share
// one watcher; it stops with the last. Snapshot.Watch says what vouched for a read: WatchNotified,
// WatchPolled (the change signal read per read) or WatchNone (every table
// saved).
//
// Options.FullVerify (10 min) bounds how long notifications alone vouch for a
// table: a Read that would keep one saved that long ago saves it again and
// compares; a difference is a model that drifted — counted in
// Snapshot.Resyncs and logged at warn. (LegacyVerify's re-read of legacy nat
// counts a difference the same way.)
//
// Cost, on 10,000 Services (docs/performance.md, "Change notifications" and
// "The Read after a relevant change"): one
// kube-proxy partial sync in iptables mode, nft backend, is two transactions
// and 35,000 notifications, 24.5 MiB, which the watcher judges in about 14 ms
// of CPU (under 0.07 s with the receives), against 3.4 s of CPU of the
// iptables-nft-restore that wrote them; the Read after it saves nothing
// (21 ms, against 1.7 s that saves nat and filter again). nftables mode's
// partial sync is one transaction of a few hundred notifications, the Read
// after it 0.3 ms against 5 s; the Read after a relevant one (a Service's
// local endpoint gone: Reads in part) 9.7 ms of CPU against 5.3 s, where the
// sync's nft cost 144 ms. A full sync (215,000 notifications) queued
// 40 MiB at most.
//
// # Reads in part
//
// In nftables mode a Read that finds a kept table no longer vouched for —
// relevant transactions came after its save — asks the watcher which objects
// they changed and reads only those again, over netlink in the Runner's
// namespace (nftrelist.go), instead of listing the table: a relevant change
// (a Service's local endpoints, its drop) usually touches one Service, its
// local-* and external-* chains and an element or two of the maps, where
// `nft -j list table` costs seconds of CPU at 10,000 Services. The parse keeps
// what it read per object (nftmodel.go): the Service chains present, each
// local-* chain's endpoints, the elements of no-endpoint-nodeports and
// no-endpoint-services and those of service-nodeports and service-ips that go
// to an external-* chain (keys decoded to address, protocol number and port,
// as the kernel holds them, so a listing and a dump give the same key): 3.7 MiB
// at 10,000 Services, beside the states' 1.5 MiB. Every port's state is
// computed from that model by the one function both reads end in. A changed local-* or
// external-* chain is dumped (GETRULE, filtered by chain in the kernel) and
// its rules decoded for what the JSON parse reads of them — a dnat's address
// and port from its registers, each element of a numgen map, the endpoint-*
// chains of goto and jump verdicts — and every chain it jumps to; whether a
// chain exists is asked (GETCHAIN: an empty dump is also what a missing chain
// gives); a changed map is dumped (GETSETELEM; a missing one is deleted).
// `nft -j list chain` would not do: nft fills its cache first, every set with
// its elements and every rule of the table, about the cost of the whole
// listing (3.5 s of CPU at 10,000 Services; it answers "No such file or
// directory" for a missing chain). Creating a chain is not a notified change,
// but kube-proxy sends to every chain it creates from a map element or an
// external-* rule, whose change is: every Service chain a re-read element or
// rule sends to that the model does not know is read too (a new ClusterIP
// Service's only chain is found through its service-ips element).
//
// The objects are read at one generation: the watcher has judged every
// transaction up to it (so the names are complete) and it has not moved when
// the reads are done (else they are done again, three times at most). The
// table is listed whole instead when the names cannot be given, the model is
// opaque (a key not in the shape of kube-proxy's maps), a read fails, or what
// it reads is not in kube-proxy's shape (an interval, a catch-all element);
// FullVerify lists it whole at least every 10 minutes and compares with the
// model read in part.
//
// In iptables mode with the nft backend (iptrelist.go) nat's state per Service
// port comes from that port's chains alone: whether any of KUBE-SVC, KUBE-SVL,
// KUBE-EXT, KUBE-FW and KUBE-XLB-<hash> exists (Programmed), and the local
// endpoints KUBE-SVL (or KUBE-XLB) jumps to. When every nat object the watcher
// names since the kept save is one of those chains (a Service's local endpoints
// came, went or moved), each named port's five chains are asked after (GETCHAIN)
// and its KUBE-SVL and KUBE-XLB listed alone, `iptables-nft -t nat -S <chain>`
// (iptables-nft fetches only that chain: 2 ms at 10,000 Services, where saving
// nat costs 1.2 s; the kernel holds the rules in nf_tables' form, and iptables-nft
// spells them back as a save does, for the same parse), at one generation as
// above; a port with none of its chains left is gone. A change in KUBE-SERVICES
// or KUBE-NODEPORTS (a Service created or deleted, its addresses or NodePort
// moved), a table or a set saves nat whole, as do ≤1.24 layouts (drops in nat,
// never kept). filter, whose counters are read anyway, is kept while no relevant
// transaction since its save named one of its chains (a change in nat alone
// leaves it), and saved whole otherwise. The legacy backend saves its tables
// whole.
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
