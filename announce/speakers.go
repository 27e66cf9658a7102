package announce

import (
	"context"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// MetalLBSpeakers is what a cluster-wide reader (List) saw of MetalLB's speakers, the part of MetalLB that
// announces: its controller only allocates addresses (the ip-allocated-from-pool annotation). MetalLB's
// documented Calico setup runs the controller without speakers and lets Calico advertise the addresses over
// BGP; there no ServiceL2Status or ServiceBGPStatus is ever written, and the absence of a record says nothing
// of whether the address is announced.
type MetalLBSpeakers string

// What a reader saw of MetalLB's speakers.
const (
	// SpeakersNotLooked: the reader did not look (a node's informers: an exporter reads its own node's BGP
	// records only and never calls an address unrecorded).
	SpeakersNotLooked MetalLBSpeakers = ""
	// SpeakersSeen: a pod with a speaker's labels runs, or some ServiceL2Status or ServiceBGPStatus exists
	// (only speakers write them, each owned by the speaker's pod, so they go with it).
	SpeakersSeen MetalLBSpeakers = "seen"
	// SpeakersNone: no status record anywhere, and no pod with a speaker's labels in the cluster.
	SpeakersNone MetalLBSpeakers = "none"
	// SpeakersUnread: no status record anywhere, and the pods could not be listed (RBAC): whether speakers run
	// is not known.
	SpeakersUnread MetalLBSpeakers = "unread"
)

// GVRPod is read only to find MetalLB's speakers, with their labels as selector.
var GVRPod = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// metallbSpeakerSelectors are the labels of MetalLB's speaker pods: its manifests' (config/manifests: app=metallb,
// component=speaker, also its memberlist's METALLB_ML_LABELS) and its Helm chart's (selectorLabels plus
// app.kubernetes.io/component: speaker; the chart's speaker.enabled=false leaves the DaemonSet out).
var metallbSpeakerSelectors = []string{
	"app=metallb,component=speaker",
	"app.kubernetes.io/name=metallb,app.kubernetes.io/component=speaker",
}

// lookForSpeakers is what List saw of MetalLB's speakers, records telling whether it read any MetalLB status
// object: a record is a speaker's, so the pods are listed only without one (one pod each selector at most).
func lookForSpeakers(ctx context.Context, client dynamic.Interface, records bool) MetalLBSpeakers {
	if records {
		return SpeakersSeen
	}
	for _, sel := range metallbSpeakerSelectors {
		list, err := client.Resource(GVRPod).List(ctx, metav1.ListOptions{LabelSelector: sel, Limit: 1})
		if err != nil {
			return SpeakersUnread
		}
		if len(list.Items) > 0 {
			return SpeakersSeen
		}
	}
	return SpeakersNone
}

// metallbAllocated: MetalLB's controller allocated the Service's addresses.
func metallbAllocated(svc *corev1.Service) bool {
	return slices.ContainsFunc(metallbAllocatedAnnotations, func(k string) bool { return svc.Annotations[k] != "" })
}

// AllocatedOnly lists the Service's load balancer IPs (loadBalancerIPs) that MetalLB allocated where a
// cluster-wide reader saw no MetalLB speaker (SpeakersNone or SpeakersUnread) and no other announcer's record
// (announcements: the Service's annotations' and AnnouncementsFor's) covers them: MetalLB does not announce
// them, and whoever does (Calico's BGP serviceLoadBalancerIPs, in MetalLB's Calico setup) leaves no record a
// reader knows. Which nodes receive them is unknown: neither unannounced nor a node's "cannot tell" of a
// known announcer. Nil for a node's reader (SpeakersNotLooked) and where speakers were seen.
func (s Snapshot) AllocatedOnly(svc *corev1.Service, announcements []Announcement, loadBalancerIPs []string) []string {
	if !s.clusterWide || (s.Speakers != SpeakersNone && s.Speakers != SpeakersUnread) || !metallbAllocated(svc) {
		return nil
	}
	var out []string
	for _, ip := range loadBalancerIPs {
		if !slices.ContainsFunc(announcements, func(a Announcement) bool { return !a.Expired && a.Covers(ip) }) {
			out = append(out, ip)
		}
	}
	return out
}

// SpeakersWhy says what the reader saw of MetalLB's speakers when it saw none ("" otherwise).
func (s Snapshot) SpeakersWhy() string {
	switch s.Speakers {
	case SpeakersNone:
		return "no MetalLB speaker runs (no pod labelled app=metallb,component=speaker or " +
			"app.kubernetes.io/name=metallb,app.kubernetes.io/component=speaker, and no ServiceL2Status or ServiceBGPStatus " +
			"in the cluster): MetalLB allocates the address and announces nothing"
	case SpeakersUnread:
		return "no ServiceL2Status or ServiceBGPStatus exists in the cluster, and the pods could not be listed to look " +
			"for MetalLB's speakers: whether MetalLB announces the address is not known"
	}
	return ""
}
