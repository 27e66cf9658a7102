package status

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/printers"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/placement"
)

const (
	// tableDroppingNodes and docDroppingNodes bound the dropping node names a row and a document item carry:
	// on a cluster of thousands of nodes a Service can drop on all of them, and the names of every node of
	// every Service would be the whole grid again. --node and -o wide give every node's verdict.
	tableDroppingNodes = 3
	docDroppingNodes   = 100
)

// ServiceStatusList is status's JSON and YAML document: one item per Local Service, worst first.
type ServiceStatusList struct {
	metav1.TypeMeta `json:",inline"`
	Items           []ServiceStatus `json:"items"`
}

// ServiceStatus is one Local Service across the judged nodes (every node, or those --node and --node-selector
// name). The counts are of judged nodes.
type ServiceStatus struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        statusMeta         `json:"metadata"`
	Type            corev1.ServiceType `json:"type"`
	// Status: Failing (a node drops it), Outage (no endpoint anywhere for a port: rejected on every node),
	// Ignored (annotation localtraffic.io/intentional-placement: its drops fail nothing), CannotTell (a node would
	// drop what only the node can tell reaches it), OK.
	Status              string `json:"status"`
	IgnoredReason       string `json:"ignoredReason,omitempty"`
	HealthCheckNodePort int32  `json:"healthCheckNodePort,omitempty"`
	Nodes               int    `json:"nodes"`
	Receiving           int    `json:"receiving"`
	Serving             int    `json:"serving"`
	Dropping            int    `json:"dropping"`
	CannotTell          int    `json:"cannotTell"`
	Drained             int    `json:"drained"`
	// Drops: what the dropping nodes drop of what they receive ("NodePort 30090/TCP"), each once.
	Drops []string `json:"drops,omitempty"`
	// DroppingNodes: the first dropping nodes by name, at most docDroppingNodes; DroppingNodesOmitted the rest.
	DroppingNodes        []string `json:"droppingNodes,omitempty"`
	DroppingNodesOmitted int      `json:"droppingNodesOmitted,omitempty"`
	// Unannounced: load balancer IPs no live announcer holds while the Service has endpoints (MetalLB, Cilium
	// L2): every client of them is lost, however many nodes serve; the Service is Failing.
	Unannounced []string `json:"unannounced,omitempty"`
	// AnnouncerUnknown: load balancer IPs MetalLB allocated where no MetalLB speaker was seen (its Calico setup:
	// Calico advertises them), AnnouncerUnknownWhy what was seen. Not MetalLB-announced, and who announces them
	// the API does not show: neither unannounced nor failing, and the nodes that would drop them are counted
	// in CannotTell.
	AnnouncerUnknown    []string `json:"announcerUnknown,omitempty"`
	AnnouncerUnknownWhy string   `json:"announcerUnknownWhy,omitempty"`
	// Observed (--from-exporters): per blackhole reason the exporters report, the judged nodes reporting it.
	Observed map[string][]string `json:"observed,omitempty"`
	// PreStop (-o json|yaml with --prometheus or --from-exporters): the Service's measured drain and the preStop
	// sleep and termination grace period that would have kept its pods serving until its load balancers stopped
	// sending, per workload; absent when it has no measured drain.
	PreStop *placement.PreStopAdvice `json:"preStop,omitempty"`
	// NodeStatuses: every judged node's verdict, only when the output is about named nodes (--node,
	// --node-selector) or one named Service (status SERVICE); with --from-exporters each carries what its
	// exporter observes.
	NodeStatuses []placement.NodeStatus `json:"nodeStatuses,omitempty"`
}

type statusMeta struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// GetObjectMeta lets cli-runtime's name printer read the item's name.
func (s *ServiceStatus) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Namespace: s.Metadata.Namespace, Name: s.Metadata.Name}
}

// DeepCopyObject makes the item a runtime.Object for cli-runtime's printers.
func (s *ServiceStatus) DeepCopyObject() runtime.Object {
	c := *s
	c.Drops, c.DroppingNodes, c.NodeStatuses = slices.Clone(s.Drops), slices.Clone(s.DroppingNodes), slices.Clone(s.NodeStatuses)
	c.Unannounced, c.AnnouncerUnknown = slices.Clone(s.Unannounced), slices.Clone(s.AnnouncerUnknown)
	if s.PreStop != nil {
		a := *s.PreStop
		a.Workloads = slices.Clone(a.Workloads)
		c.PreStop = &a
	}
	if s.Observed != nil {
		c.Observed = map[string][]string{}
		for k, v := range s.Observed {
			c.Observed[k] = slices.Clone(v)
		}
	}
	return &c
}

// DeepCopyObject makes the list a runtime.Object for cli-runtime's printers.
func (l *ServiceStatusList) DeepCopyObject() runtime.Object {
	c := &ServiceStatusList{TypeMeta: l.TypeMeta, Items: make([]ServiceStatus, len(l.Items))}
	for i := range l.Items {
		c.Items[i] = *l.Items[i].DeepCopyObject().(*ServiceStatus)
	}
	return c
}

// statusView is what the printers are given: the summaries and how to show them.
type statusView struct {
	summaries []placement.Summary
	observed  placement.Observed // nil unless --from-exporters
	perNode   bool               // nodes or the Service were named: the document carries every judged node's verdict
	// preStop: the advice of each Service with a measured drain ("namespace/name"); preStopRead: the drains were
	// read (the PRESTOP column shows).
	preStop     map[string]*placement.PreStopAdvice
	preStopRead bool
}

// observedOf groups the judged nodes by the blackhole reason their exporter reports for s; nil when no
// exporter report was read, an empty map when they report none.
func (v statusView) observedOf(s *placement.Summary) map[string][]string {
	if v.observed == nil {
		return nil
	}
	key := s.Namespace + "/" + s.Name
	var out map[string][]string
	s.Each(func(n placement.NodeStatus) {
		o, ok := v.observed[n.Node]
		if !ok {
			return
		}
		if out == nil {
			out = map[string][]string{}
		}
		if r, ok := o.Reasons[key]; ok {
			out[r] = append(out[r], n.Node)
		}
	})
	return out
}

func (v statusView) document() *ServiceStatusList {
	l := &ServiceStatusList{TypeMeta: metav1.TypeMeta{APIVersion: cli.GroupVersion.String(), Kind: "ServiceStatusList"},
		Items: make([]ServiceStatus, 0, len(v.summaries))}
	for i := range v.summaries {
		s := &v.summaries[i]
		item := ServiceStatus{TypeMeta: metav1.TypeMeta{APIVersion: cli.GroupVersion.String(), Kind: "ServiceStatus"},
			Metadata: statusMeta{Namespace: s.Namespace, Name: s.Name}, Type: s.Type, Status: s.Status(),
			IgnoredReason: s.IgnoredReason, HealthCheckNodePort: s.HealthCheckNodePort, Nodes: s.Nodes,
			Receiving: s.Receiving, Serving: s.Serving, Dropping: s.Dropping, CannotTell: s.CannotTell, Drained: s.Drained,
			Drops: s.Drops, DroppingNodes: s.DroppingNodes(docDroppingNodes), Observed: v.observedOf(s), Unannounced: s.Unannounced,
			AnnouncerUnknown: s.AnnouncerUnknown, AnnouncerUnknownWhy: s.AnnouncerUnknownWhy, PreStop: v.preStop[s.Namespace+"/"+s.Name]}
		item.DroppingNodesOmitted = s.Dropping - len(item.DroppingNodes)
		if v.perNode {
			item.NodeStatuses = make([]placement.NodeStatus, 0, s.Nodes)
			key := s.Namespace + "/" + s.Name
			s.Each(func(n placement.NodeStatus) {
				if o, ok := v.observed[n.Node]; ok {
					n.Observed = placement.ObservedNoBlackhole
					if r, ok := o.Reasons[key]; ok {
						n.Observed = placement.Observation(r)
					}
				}
				item.NodeStatuses = append(item.NodeStatuses, n)
			})
		}
		l.Items = append(l.Items, item)
	}
	return l
}

// observedBlackhole tells whether some judged node's exporter reports s blackholed there.
func (v statusView) observedBlackhole(s *placement.Summary) bool {
	for _, nodes := range v.observedOf(s) {
		if len(nodes) > 0 {
			return true
		}
	}
	return false
}

// droppingCell is the first few dropping nodes: "node-a,node-b,node-c +4947 more"; "<none>" when none.
func droppingCell(s *placement.Summary) string {
	names := s.DroppingNodes(tableDroppingNodes)
	if len(names) == 0 {
		return "<none>"
	}
	out := strings.Join(names, ",")
	if more := s.Dropping - len(names); more > 0 {
		out += " +" + strconv.Itoa(more) + " more"
	}
	return out
}

// observedCell is the exporters' reports of s in one cell: "traffic_lost: node-2,node-3"; "-" when they report
// no blackhole; "?" when none was read.
func (v statusView) observedCell(s *placement.Summary) string {
	obs := v.observedOf(s)
	if obs == nil {
		return "?"
	}
	var parts []string
	for _, r := range placement.ObservedBlackholes() {
		if nodes := obs[string(r)]; len(nodes) > 0 {
			parts = append(parts, string(r)+": "+strings.Join(nodes, ","))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, "; ")
}

// preStopCell is the advice in one cell: "-" without a measured drain; per workload that has less than it needs
// "sleep 37s, grace 67s (has 0s, 30s)", or "unknown (...)" where its preStop is not readable; "ok (>=37s)" when
// every workload has enough. The workload's kind and name lead when the Service has several.
func preStopCell(a *placement.PreStopAdvice) string {
	if a == nil {
		return "-"
	}
	if len(a.Workloads) == 0 {
		return fmt.Sprintf("sleep %ds (no workload found)", a.PreStopSeconds)
	}
	var parts []string
	for _, w := range a.Workloads {
		var p string
		switch w.Needed {
		case "yes":
			p = fmt.Sprintf("sleep %ds, grace %ds (has %ds, %ds)", w.RecommendedPreStopSeconds, w.RecommendedGraceSeconds, *w.PreStopSeconds, w.GraceSeconds)
		case "unknown":
			p = fmt.Sprintf("unknown (%s; needs %ds)", w.PreStopUnknown, a.PreStopSeconds)
		default:
			continue
		}
		if len(a.Workloads) > 1 {
			p = w.Kind + "/" + w.Name + ": " + p
		}
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		return fmt.Sprintf("ok (>=%ds)", a.PreStopSeconds)
	}
	return strings.Join(parts, "; ")
}

// cell is one node's mark in the -o wide grid, and its colour on a terminal. An ignored Service's blackholes
// are still shown, in lower case and dimmed: measured, failing nothing.
func cell(ignored bool, n placement.NodeStatus) (text, colour string) {
	switch {
	case n.Blackhole && ignored:
		return "drop", cli.Dim
	case n.Blackhole:
		return "DROP", cli.Red
	case len(n.CannotTell) > 0:
		return "drop?", cli.Yellow
	case len(n.AnnouncerUnknown) > 0:
		// Not MetalLB-announced (no speaker seen): whether the address is sent here is an unknown
		// announcer's doing, not drop? of a known one.
		return "unknown", cli.Yellow
	case n.Serves:
		return fmt.Sprintf("ok %d", n.LocalEndpoints), cli.Green
	case n.Receives && !n.InRotation:
		return "drained", cli.Yellow
	case !n.Receives && len(n.Drops) == 0 && n.LocalEndpoints > 0:
		return fmt.Sprintf("(%d)", n.LocalEndpoints), cli.Dim
	default:
		return "-", cli.Dim
	}
}

// statusColour is the colour of a Service's STATUS cell.
func statusColour(status string) string {
	switch status {
	case "Failing":
		return cli.Red + cli.Bold
	case "Outage", "CannotTell":
		return cli.Yellow
	case "Ignored":
		return cli.Dim
	}
	return cli.Green
}

// table is the human output: one row per Service; wide adds what the dropping nodes drop of what they receive
// and one column per judged node (the grid). paints holds, per row, the cells to colour in their order along
// the line (nil without colour: on 5,000 nodes × 2,000 Services the grid is 10 million cells, and each byte per
// cell counts).
func (v statusView) table(wide, colour bool) (*metav1.Table, [][]paint) {
	cannotTell, unannounced, announcerUnknown, observed := false, false, false, v.observed != nil
	for i := range v.summaries {
		cannotTell = cannotTell || v.summaries[i].CannotTell > 0
		unannounced = unannounced || len(v.summaries[i].Unannounced) > 0
		announcerUnknown = announcerUnknown || len(v.summaries[i].AnnouncerUnknown) > 0
	}
	col := func(name, typ, desc string, priority int32) metav1.TableColumnDefinition {
		return metav1.TableColumnDefinition{Name: name, Type: typ, Description: desc, Priority: priority}
	}
	t := &metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{
		col("Namespace", "string", "the Service's namespace", 0),
		col("Name", "string", "the Service's name", 0),
		col("Type", "string", "NodePort or LoadBalancer", 0),
		col("Status", "string", "Failing, Outage, Ignored, CannotTell or OK", 0),
		col("Receiving", "integer", "judged nodes that receive its external traffic", 0),
		col("Serving", "integer", "of those, the nodes that serve it", 0),
		col("Dropping", "integer", "judged nodes that receive and drop it (blackholes)", 0),
	}}
	if cannotTell {
		t.ColumnDefinitions = append(t.ColumnDefinitions, col("Cannot-Tell", "integer", "nodes that would drop what only the node can tell reaches it", 0))
	}
	if unannounced {
		t.ColumnDefinitions = append(t.ColumnDefinitions, col("Unannounced", "string", "load balancer IPs no live announcer holds", 0))
	}
	if announcerUnknown {
		t.ColumnDefinitions = append(t.ColumnDefinitions, col("Announcer-Unknown", "string",
			"load balancer IPs MetalLB allocated and does not announce (no speaker seen): who announces them the API does not show", 0))
	}
	if observed {
		t.ColumnDefinitions = append(t.ColumnDefinitions, col("Observed", "string", "what the nodes' exporters report", 0))
	}
	t.ColumnDefinitions = append(t.ColumnDefinitions, col("Dropping-Nodes", "string", "the first dropping nodes", 0))
	var nodes []string
	if wide {
		t.ColumnDefinitions = append(t.ColumnDefinitions, col("Drops", "string", "what the dropping nodes drop of what they receive", 1))
		if v.preStopRead {
			t.ColumnDefinitions = append(t.ColumnDefinitions, col("PreStop", "string",
				"the preStop sleep and terminationGracePeriodSeconds the measured drain needs, where the pods have less", 1))
		}
		if len(v.summaries) > 0 {
			v.summaries[0].Each(func(n placement.NodeStatus) { nodes = append(nodes, n.Node) })
		}
		for _, n := range nodes {
			t.ColumnDefinitions = append(t.ColumnDefinitions, col(n, "string", "node "+n, 1))
		}
	}
	var paints [][]paint
	// The grid's cells take a handful of texts: each boxed once, not once per cell.
	boxed := map[string]any{}
	box := func(text string) any {
		b, ok := boxed[text]
		if !ok {
			b = text
			boxed[text] = b
		}
		return b
	}
	for i := range v.summaries {
		s := &v.summaries[i]
		st := s.Status()
		row := make([]any, 0, 9+len(nodes))
		row = append(row, s.Namespace, s.Name, string(s.Type), st, s.Receiving, s.Serving, s.Dropping)
		p := []paint{{st, statusColour(st)}}
		if cannotTell {
			row = append(row, s.CannotTell)
		}
		if unannounced {
			row = append(row, cmpOr(strings.Join(s.Unannounced, ","), "<none>"))
		}
		if announcerUnknown {
			row = append(row, cmpOr(strings.Join(s.AnnouncerUnknown, ","), "<none>"))
		}
		if observed {
			text := v.observedCell(s)
			row = append(row, text)
			if colour {
				p = append(p, paint{text, ""}) // passed over, as PRESTOP's below
			}
		}
		row = append(row, droppingCell(s))
		if wide {
			row = append(row, cmpOr(strings.Join(s.Drops, ", "), "<none>"))
			if v.preStopRead {
				text := preStopCell(v.preStop[s.Namespace+"/"+s.Name])
				row = append(row, text)
				if colour {
					// Unpainted, but passed over: the grid's cells ("-", "unknown") must not be found in it.
					p = append(p, paint{text, ""})
				}
			}
			s.Each(func(n placement.NodeStatus) {
				text, c := cell(s.Ignored, n)
				row = append(row, box(text))
				if colour {
					p = append(p, paint{text, c})
				}
			})
		}
		t.Rows = append(t.Rows, metav1.TableRow{Cells: row})
		if colour {
			paints = append(paints, p)
		}
	}
	return t, paints
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// printTable prints the table through cli-runtime's table printer and, for a terminal, colours its cells.
func (v statusView) printTable(w io.Writer, wide, noHeaders, colour bool) error {
	t, paints := v.table(wide, colour)
	if !colour {
		return printers.NewTablePrinter(printers.PrintOptions{Wide: wide, NoHeaders: noHeaders}).PrintObj(t, w)
	}
	// The table printer escapes control characters in cells (a terminal escape in a name must not reach the
	// terminal), so colour goes around the printed cells afterwards, where their padding is already done.
	cw := &colourLines{w: w, paints: paints, skip: !noHeaders}
	if err := printers.NewTablePrinter(printers.PrintOptions{Wide: wide, NoHeaders: noHeaders}).PrintObj(t, cw); err != nil {
		return err
	}
	return cw.flush()
}

// paint is a cell's printed text and its colour ("": left as it is, only passed over).
type paint struct{ text, colour string }

// colourLines colours, on each line the table printer writes, the painted cells of that row: searched in
// order along the line after the namespace and name columns, each as whole space-delimited text.
type colourLines struct {
	w      io.Writer
	paints [][]paint
	skip   bool // the next line is the header
	row    int
	buf    []byte
}

func (c *colourLines) Write(p []byte) (int, error) {
	c.buf = append(c.buf, p...)
	for {
		i := bytes.IndexByte(c.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := string(c.buf[:i])
		c.buf = c.buf[i+1:]
		if c.skip {
			c.skip = false
		} else if c.row < len(c.paints) {
			line = colourLine(line, c.paints[c.row])
			c.row++
		}
		if _, err := io.WriteString(c.w, line+"\n"); err != nil {
			return 0, err
		}
	}
}

func (c *colourLines) flush() error {
	if len(c.buf) == 0 {
		return nil
	}
	_, err := c.w.Write(c.buf)
	c.buf = nil
	return err
}

func colourLine(line string, paints []paint) string {
	// Past the namespace and the name: Service names cannot hold the upper-case words, but a cell's text may.
	pos := 0
	for range 2 {
		for pos < len(line) && line[pos] == ' ' {
			pos++
		}
		for pos < len(line) && line[pos] != ' ' {
			pos++
		}
	}
	var b strings.Builder
	b.WriteString(line[:pos])
	for _, p := range paints {
		i := wholeIndex(line[pos:], p.text)
		if i < 0 {
			continue
		}
		b.WriteString(line[pos : pos+i])
		if p.colour == "" {
			b.WriteString(p.text)
		} else {
			b.WriteString(p.colour + p.text + cli.Reset)
		}
		pos += i + len(p.text)
	}
	b.WriteString(line[pos:])
	return b.String()
}

// wholeIndex is the index of text in s where it stands between spaces (or the line's ends); -1 if nowhere.
func wholeIndex(s, text string) int {
	off := 0
	for {
		i := strings.Index(s[off:], text)
		if i < 0 {
			return -1
		}
		i += off
		end := i + len(text)
		if (i == 0 || s[i-1] == ' ') && (end == len(s) || s[end] == ' ') {
			return i
		}
		off = i + 1
	}
}

// printStatus prints v as -o asks: "" (or text) a table, wide the table with the grid, anything else through
// cli-runtime's printers (json, yaml, name, jsonpath, go-template) from the document.
func printStatus(w io.Writer, v statusView, flags cli.PrintFlags, colour bool) error {
	switch output := flags.Output(); output {
	case "", "text":
		return v.printTable(w, false, flags.NoHeaders, colour)
	case "wide":
		return v.printTable(w, true, flags.NoHeaders, colour)
	}
	doc := v.document()
	items := make([]runtime.Object, len(doc.Items))
	for i := range doc.Items {
		items[i] = &doc.Items[i]
	}
	return cli.PrintDocument(w, flags, doc, items)
}
