// Package placement judges the placement story of every Service with externalTrafficPolicy Local: which nodes
// receive its external traffic, which of them host (or can ever host) a ready endpoint, and what in the
// workloads, budgets, autoscalers and load balancer annotations lets a node that receives traffic drop it.
//
// Everything here is a pure function over API objects: live mode (the kubectl plugin reading the apiserver) and
// manifest mode (the same objects decoded from files, with synthetic nodes) share it. Endpoint counting is the
// exporter's own (kubeview), so the plugin and the exporter never disagree on which node drops.
package placement

import "fmt"

// Severity orders findings. Critical: nodes that receive traffic blackhole now, or will by construction once the
// manifests are applied. Warning: they blackhole during a drain, rollout, scale-down, node replacement, or
// because a load balancer's health check is misdirected. Info: advice.
type Severity int

const (
	Info Severity = iota + 1
	Warning
	Critical
)

func (s Severity) String() string {
	switch s {
	case Info:
		return "info"
	case Warning:
		return "warning"
	case Critical:
		return "critical"
	}
	return "unknown"
}

// ParseSeverity reads "info", "warning" or "critical".
func ParseSeverity(s string) (Severity, bool) {
	for _, v := range []Severity{Info, Warning, Critical} {
		if v.String() == s {
			return v, true
		}
	}
	return 0, false
}

// MarshalText writes the severity's name, so JSON output says "critical" rather than 3.
func (s Severity) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads the name back, so the JSON report decodes into Report.
func (s *Severity) UnmarshalText(b []byte) error {
	v, ok := ParseSeverity(string(b))
	if !ok {
		return fmt.Errorf("unknown severity %q", b)
	}
	*s = v
	return nil
}

// Rule is one kind of finding. IDs are stable: CI configurations and SARIF consumers key on them, and
// docs/audit.md documents each (a test keeps the two equal).
type Rule struct {
	ID    RuleID
	Name  string
	Short string // one line, for SARIF's shortDescription and the text output's legend
}

// RuleID is a finding kind's stable ID (LT100 ...).
type RuleID string

// Finding IDs.
const (
	BlackholeNow          RuleID = "LT100"
	PinnedPlacement       RuleID = "LT101"
	ReplicasBelowNodes    RuleID = "LT102"
	NoSpread              RuleID = "LT103"
	SpreadIgnoresTaints   RuleID = "LT104"
	SurgeDeadlock         RuleID = "LT105"
	HPAMinBelowNodes      RuleID = "LT106"
	DisruptionEmptiesNode RuleID = "LT107"
	DaemonSetMissesNodes  RuleID = "LT108"
	HealthCheckMisdirect  RuleID = "LT109"
	NodePortNoHealthCheck RuleID = "LT110"
	SelectorMatchesNone   RuleID = "LT111"
	AnnouncedWithoutLocal RuleID = "LT112"
	MetalLBFewNodes       RuleID = "LT113"
)

// Rules lists every finding kind, in ID order (a fresh slice: callers may not change the catalogue).
func Rules() []Rule {
	return []Rule{
		{BlackholeNow, "blackhole-now", "Nodes that receive the Service's external traffic have no local endpoint now"},
		{PinnedPlacement, "pinned-placement", "Replicas are pinned to fewer nodes than receive the Service's traffic"},
		{ReplicasBelowNodes, "replicas-below-nodes", "Fewer replicas than nodes that receive the Service's traffic"},
		{NoSpread, "no-spread", "No hard per-node spread: the scheduler may pack replicas and leave nodes without one"},
		{SpreadIgnoresTaints, "spread-counts-unschedulable-nodes", "A hostname spread counts nodes the pods can never land on: replicas stay Pending"},
		{SurgeDeadlock, "surge-deadlock", "A hard per-node constraint with maxSurge above 0 and no room for the surge pod: the rollout parks"},
		{HPAMinBelowNodes, "hpa-min-below-nodes", "The HorizontalPodAutoscaler may scale below the number of nodes that receive traffic"},
		{DisruptionEmptiesNode, "disruption-empties-nodes", "An update strategy or disruption budget lets nodes lose their last ready replica"},
		{DaemonSetMissesNodes, "daemonset-misses-nodes", "The DaemonSet does not run on every node that receives the Service's traffic"},
		{HealthCheckMisdirect, "lb-health-check-misdirected", "The load balancer's health check does not ask healthCheckNodePort over HTTP"},
		{NodePortNoHealthCheck, "nodeport-no-health-check", "A NodePort Local Service has no health check a load balancer could use"},
		{SelectorMatchesNone, "selector-matches-no-workload", "The Service's selector matches no workload"},
		{AnnouncedWithoutLocal, "announced-without-local-endpoint", "A layer 2 announcer announces the load balancer IP from a node without a ready local endpoint"},
		{MetalLBFewNodes, "metallb-local-single-node", "MetalLB announces the Service from fewer than two nodes: losing one pod or node withdraws the address"},
	}
}

// RuleByID returns the rule with that ID.
func RuleByID(id RuleID) (Rule, bool) {
	for _, r := range Rules() {
		if r.ID == id {
			return r, true
		}
	}
	return Rule{}, false
}

// ObjectRef names an object a finding involves.
type ObjectRef struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	// Source is the file the object came from in manifest mode ("stdin" for standard input), Line the line
	// its document (or List item) starts on.
	Source string `json:"source,omitempty"`
	Line   int    `json:"line,omitempty"`
}

// Finding is one thing wrong with a Service's placement story.
type Finding struct {
	ID       RuleID      `json:"id"`
	Name     string      `json:"name"`
	Severity Severity    `json:"severity"`
	Service  ObjectRef   `json:"service"`
	Objects  []ObjectRef `json:"objects"`
	// Nodes are the nodes that blackhole (now, by construction, or during the disruption the finding names).
	Nodes   []string `json:"nodes,omitempty"`
	Message string   `json:"message"`
	Why     string   `json:"why"`
	Fix     string   `json:"fix"`
	// Ignored: the Service is placed this way on purpose (its localtraffic.io/intentional-placement annotation
	// says why, in IgnoredReason). The finding is reported, with its severity, but fails nothing.
	Ignored       bool   `json:"ignored,omitempty"`
	IgnoredReason string `json:"ignoredReason,omitempty"`
}
