package cluster

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestNewService: the harness Service's fixed shape, the policy by type, and each option.
func TestNewService(t *testing.T) {
	port := corev1.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}
	want := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns"},
		Spec: corev1.ServiceSpec{
			Type:                  corev1.ServiceTypeNodePort,
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			Selector:              map[string]string{"app": "web"},
			Ports:                 []corev1.ServicePort{port},
		},
	}
	if got := NewService("ns", "web", corev1.ServiceTypeNodePort); !reflect.DeepEqual(got, want) {
		t.Errorf("NodePort:\n got %+v\nwant %+v", got, want)
	}
	if got := NewService("ns", "web", corev1.ServiceTypeClusterIP); got.Spec.ExternalTrafficPolicy != "" {
		t.Errorf("ClusterIP: externalTrafficPolicy %q, want none", got.Spec.ExternalTrafficPolicy)
	}

	got := NewService("ns", "web", corev1.ServiceTypeLoadBalancer, WithPolicy(corev1.ServiceExternalTrafficPolicyCluster),
		WithNodePort(30090), WithHealthCheckNodePort(32000), WithExternalIPs("192.0.2.1"), WithClientIPAffinity(),
		WithAppLabel(), DualStack)
	requireDual := corev1.IPFamilyPolicyRequireDualStack
	want = &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", Labels: map[string]string{"app": "web"}},
		Spec: corev1.ServiceSpec{
			Type:                  corev1.ServiceTypeLoadBalancer,
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyCluster,
			Selector:              map[string]string{"app": "web"},
			Ports:                 []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080), NodePort: 30090}},
			HealthCheckNodePort:   32000,
			ExternalIPs:           []string{"192.0.2.1"},
			SessionAffinity:       corev1.ServiceAffinityClientIP,
			IPFamilyPolicy:        &requireDual,
			IPFamilies:            []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("every option:\n got %+v\nwant %+v", got, want)
	}
}

// TestForEach: every index once, workers at a time at most; the first error stops the feed and comes back;
// a cancelled context is reported when nothing failed.
func TestForEach(t *testing.T) {
	var mu sync.Mutex
	seen := map[int]int{}
	var running, most atomic.Int32
	err := forEach(context.Background(), 3, 5, 105, func(ctx context.Context, i int) error {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		mu.Lock()
		seen[i]++
		mu.Unlock()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 100 || seen[5] != 1 || seen[104] != 1 || seen[105] != 0 {
		t.Errorf("ran %d indexes (5: %d, 104: %d, 105: %d), want 5..104 once each", len(seen), seen[5], seen[104], seen[105])
	}
	for i, n := range seen {
		if n != 1 {
			t.Errorf("index %d ran %d times", i, n)
		}
	}
	if m := most.Load(); m > 3 {
		t.Errorf("%d ran at once, want at most 3", m)
	}

	boom := errors.New("boom")
	var ran atomic.Int32
	err = forEach(context.Background(), 2, 0, 10000, func(ctx context.Context, i int) error {
		ran.Add(1)
		if i == 3 {
			return boom
		}
		return ctx.Err()
	})
	if !errors.Is(err, boom) {
		t.Errorf("err %v, want boom", err)
	}
	if n := ran.Load(); n >= 10000 {
		t.Errorf("all %d ran after the error", n)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := forEach(ctx, 2, 0, 10, func(context.Context, int) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: err %v, want context.Canceled", err)
	}
}
