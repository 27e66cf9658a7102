package eventwriter

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/localtraffic/localtraffic-exporter/exposure"
)

// ReportingController is every Event's reportingController.
const ReportingController = "localtraffic-exporter"

// Action is every Event's action: what the node did to the Service's traffic.
const Action = "DroppedConnections"

// reasons are the Events' reasons, by the episode's cause.
var reasons = map[exposure.Cause]string{
	exposure.CauseRollout:      "ExposedDuringRollout",
	exposure.CauseDrain:        "ExposedDuringDrain",
	exposure.CauseNodeDeleting: "ExposedNodeDeleting",
	exposure.CauseNodeJoin:     "ExposedNodeJoin",
	exposure.CauseOther:        "ExposedOther",
}

// Reason is the Event's reason for an episode of cause c.
func Reason(c exposure.Cause) string {
	if r, ok := reasons[c]; ok {
		return r
	}
	return reasons[exposure.CauseOther]
}

// run is what one Event reports: one episode, or the repeats at one destination that waited for the rate limit
// together (its series).
type run struct {
	node string
	eps  []exposure.Finished
}

// sameRun: f repeats the run's destination and cause on the same node.
func (r run) sameRun(f exposure.Finished) bool {
	first := r.eps[0]
	return f.Key == first.Key && f.Cause == first.Cause && lost(f) == lost(first)
}

// lost: the episode lost attempts (a Warning); without the meter its attempts are not known, and an episode
// that lasted is still a Warning.
func lost(f exposure.Finished) bool {
	if f.AttemptsCounted {
		return f.Attempts > 0
	}
	return f.Seconds > 0
}

// EventName is the Event's name for the episode at key of node that began at start: the same episode always
// gets the same name, so a second writer's create of it is AlreadyExists.
func EventName(node string, f exposure.Finished) string {
	k := f.Key
	h := sha256.Sum256([]byte(strings.Join([]string{node, k.Namespace, k.Service, k.Port, k.Protocol, k.Family, k.Kind,
		k.Address, strconv.Itoa(int(k.DestPort)), strconv.FormatInt(f.Start.UnixNano(), 10)}, "\x00")))
	return k.Service + ".lt-" + hex.EncodeToString(h[:8])
}

// destination says where the episode was, as a person reads it.
func destination(k exposure.Key) string {
	var where string
	switch k.Kind {
	case "node_port":
		where = fmt.Sprintf("NodePort %d/%s", k.DestPort, k.Protocol)
	case "load_balancer_ip":
		where = fmt.Sprintf("load balancer %s:%d/%s", k.Address, k.DestPort, k.Protocol)
	case "external_ip":
		where = fmt.Sprintf("externalIP %s:%d/%s", k.Address, k.DestPort, k.Protocol)
	default:
		where = fmt.Sprintf("%s %s:%d/%s", k.Kind, k.Address, k.DestPort, k.Protocol)
	}
	return where + " (" + k.Family + ")"
}

// secs is a duration in seconds as the note writes it: whole seconds, a tenth below ten.
func secs(s float64) string {
	if s < 10 {
		return strconv.FormatFloat(math.Round(s*10)/10, 'f', -1, 64) + " s"
	}
	return strconv.FormatFloat(math.Round(s), 'f', -1, 64) + " s"
}

// Note is what the Event says of the episode f at node (the latest of a series of n). b is what the writer read
// of the Service's pods at write time, nil where it could not: then the note names no workload, and advises the
// recommended preStop without comparing it to the pods'.
func Note(node string, f exposure.Finished, n int, b *backing) string {
	var sb strings.Builder
	sb.WriteString(string(f.Cause))
	if b != nil && len(b.workloads) > 0 {
		sb.WriteString(" " + strings.Join(b.workloads, ", "))
	}
	fmt.Fprintf(&sb, ": %s dropped ", node)
	if f.AttemptsCounted {
		fmt.Fprintf(&sb, "%d connection attempts", f.Attempts)
	} else {
		sb.WriteString("new connections (attempts not counted: the arrivals meter was off or blind)")
	}
	fmt.Fprintf(&sb, " at %s over %s", destination(f.Key), secs(f.Seconds))
	if f.LBDrainSeconds != nil {
		fmt.Fprintf(&sb, "; the load balancer took %s to stop sending", secs(*f.LBDrainSeconds))
	}
	if need := f.RecommendedPreStopSeconds; need > 0 {
		switch {
		case b == nil || b.preStop == nil:
			fmt.Fprintf(&sb, "; set the pods' preStop to at least %d s", need)
		default:
			// Pods with enough preStop get no advice: a longer one would not have saved these attempts.
			if needed, grace := b.advice(need); needed {
				fmt.Fprintf(&sb, "; preStop %d s — set it to at least %d s and terminationGracePeriodSeconds to at least %d s",
					*b.preStop, need, grace)
			}
		}
	}
	if n > 1 {
		fmt.Fprintf(&sb, " (the latest of %d such episodes)", n)
	}
	return sb.String()
}

// newEvent is the Event of run r regarding the Service svc (its UID), reported by instance; b is what the writer
// read of the Service's pods (nil: nothing).
func newEvent(r run, uid types.UID, instance string, b *backing) *eventsv1.Event {
	first, last := r.eps[0], r.eps[len(r.eps)-1]
	typ := corev1.EventTypeNormal
	if lost(last) {
		typ = corev1.EventTypeWarning
	}
	ev := &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: EventName(r.node, first), Namespace: first.Key.Namespace},
		EventTime:           metav1.NewMicroTime(first.End),
		ReportingController: ReportingController,
		ReportingInstance:   instance,
		Action:              Action,
		Reason:              Reason(first.Cause),
		Type:                typ,
		Note:                Note(r.node, last, len(r.eps), b),
		Regarding: corev1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: first.Key.Namespace,
			Name: first.Key.Service, UID: uid},
		Related: &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: r.node},
	}
	if len(r.eps) > 1 {
		ev.Series = &eventsv1.EventSeries{Count: int32(len(r.eps)), LastObservedTime: metav1.NewMicroTime(last.End)}
	}
	if len(ev.Note) > 1024 {
		ev.Note = ev.Note[:1021] + "..."
	}
	return ev
}
