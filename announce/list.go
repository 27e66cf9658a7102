package announce

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
)

// List reads the announcers' objects once, cluster-wide, for a reader without informers (kubectl
// localtraffic status): every ServiceL2Status, every node's ServiceBGPStatus, Cilium's L2 announcement
// Leases in ciliumNamespace and its CiliumL2AnnouncementPolicies, judged at now; where no MetalLB status exists,
// whether MetalLB's speakers run at all (one pod of each of metallbSpeakerSelectors). A source that cannot be
// listed gets its state (absent, forbidden, stale) and no records; nothing is an error. A Service's
// announcements are then its own annotations' (FromAnnotations) and AnnouncementsFor's.
//
// One read sees no lease change: a lease counts from its holder's renewTime here. That is a fair guess for a
// lease renewed a moment ago, and none for one that looks expired or renewed in the future, or for a Service a
// policy selects and no live lease names (released, or none): a holder whose clock runs behind looks expired,
// one whose clock runs ahead looks live after it stopped, and a failover in flight looks like a loss. Settle watches those, as the exporter does, before anyone is told; until then the
// snapshot calls no lease expired that renewTime does not, and no Service unheld (CiliumUnheld says nothing).
func List(ctx context.Context, client dynamic.Interface, ciliumNamespace string, now time.Time) Snapshot {
	s := Snapshot{States: map[Source]SourceState{}, byService: map[string][]Announcement{}, leases: map[string]leaseRecord{},
		now: now, clusterWide: true}
	metallbRecords := false
	for _, src := range []struct {
		source Source
		ri     dynamic.ResourceInterface
	}{
		{SourceMetalLBL2, client.Resource(GVRServiceL2Status)},
		{SourceMetalLBBGP, client.Resource(GVRServiceBGPStatus)},
		{SourceCiliumL2, client.Resource(GVRLease).Namespace(ciliumNamespace)},
		{SourceCiliumL2Policy, client.Resource(GVRCiliumL2Policy)},
	} {
		list, err := src.ri.List(ctx, metav1.ListOptions{})
		if err != nil {
			var t sourceTrack
			t.fail(err)
			s.States[src.source] = t.state(false)
			continue
		}
		s.States[src.source] = SourceOK
		metallbRecords = metallbRecords || (src.source == SourceMetalLBL2 || src.source == SourceMetalLBBGP) && len(list.Items) > 0
		for i := range list.Items {
			s.addRecord(src.source, &list.Items[i], "")
		}
	}
	s.Speakers = lookForSpeakers(ctx, client, metallbRecords)
	for name, l := range s.leases {
		l.observed = l.renew
		s.leases[name] = l
	}
	return s
}
