package kubeview

import (
	"context"
	"errors"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/localtraffic/localtraffic-exporter/kubeview/kubeviewtest"
)

// syncedView starts a View over client and waits for its informers; both end with the test.
func syncedView(t *testing.T, client *fake.Clientset) (*View, context.Context) {
	t.Helper()
	v := New(kubeviewtest.NewAPI(client), "node-1")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	v.Start(ctx)
	if err := v.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	return v, ctx
}

func statusOf(t *testing.T, v *View, resource string) InformerStatus {
	t.Helper()
	for _, st := range v.Informers() {
		if st.Resource == resource {
			return st
		}
	}
	t.Fatalf("no informer for %s", resource)
	return InformerStatus{}
}

// waitFor polls cond (a hang guard of 30 s, not a timing assertion).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("never: %s", what)
		}
	}
}

// Failed lists count as errors and leave the view unsynced and without a last success; once the API server
// answers, the informer lists, opens its watch, and every answer moves the last success forward.
func TestInformerListWatchBookkeeping(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
	client := fake.NewClientset(node, localService("shop", "web", corev1.ServiceTypeNodePort))
	var failLists atomic.Int64
	failLists.Store(2)
	client.PrependReactor("list", "services", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failLists.Add(-1) >= 0 {
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	v, ctx := syncedView(t, client)
	svc := statusOf(t, v, ResourceServices)
	if svc.ListError != 2 || svc.ListSuccess != 1 {
		t.Errorf("services lists: %d ok, %d errors; want 1 and 2 (the reflector retries)", svc.ListSuccess, svc.ListError)
	}
	waitFor(t, "the services watch opened", func() bool { return statusOf(t, v, ResourceServices).WatchSuccess >= 1 })
	for _, st := range v.Informers() {
		if st.LastSuccess.IsZero() || !st.Synced || st.ListSuccess == 0 {
			t.Errorf("%s after sync: %+v", st.Resource, st)
		}
		if st.Resource != ResourceServices && st.ListError != 0 {
			t.Errorf("%s: %d list errors, none injected", st.Resource, st.ListError)
		}
	}

	// A watch event is an answer from the API server too.
	before := statusOf(t, v, ResourceServices).LastSuccess
	time.Sleep(2 * time.Millisecond) // the clock must be able to move
	if _, err := client.CoreV1().Services("shop").Create(ctx, localService("shop", "new", corev1.ServiceTypeNodePort), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the watch event moved the last success", func() bool {
		st := statusOf(t, v, ResourceServices)
		return st.LastSuccess.After(before) && !st.LastEvent.IsZero()
	})
}

// A watch the API server refuses counts as a watch error; the informer keeps its last state and serves it.
func TestInformerWatchErrorsKeepLastState(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
	client := fake.NewClientset(node, localService("shop", "web", corev1.ServiceTypeNodePort))
	client.PrependWatchReactor("services", func(k8stesting.Action) (bool, watch.Interface, error) {
		return true, nil, errors.New("apiserver unreachable")
	})
	v, _ := syncedView(t, client)
	waitFor(t, "a services watch error counted", func() bool { return statusOf(t, v, ResourceServices).WatchError >= 1 })
	snap, err := v.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Services) != 1 || snap.Services[0].Name != "web" {
		t.Errorf("snapshot while the watch fails: %+v, want the listed Service", snap.Services)
	}
	if st := statusOf(t, v, ResourceServices); st.WatchSuccess != 0 {
		t.Errorf("%d watches succeeded, all were refused", st.WatchSuccess)
	}
}

// While nothing answers at the API server's address the list-watch retries on its own, every second or two,
// instead of handing the error to the reflector, whose backoff would reach 30 to 60 seconds: the informer
// resumes within seconds of the API server's return. Each refused attempt still counts as an error.
func TestInformerRetriesWhileAPIServerAbsent(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
	client := fake.NewClientset(node, localService("shop", "web", corev1.ServiceTypeNodePort))
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	var refusals atomic.Int64
	refusals.Store(3)
	client.PrependWatchReactor("services", func(k8stesting.Action) (bool, watch.Interface, error) {
		if refusals.Add(-1) >= 0 {
			return true, nil, refused
		}
		return false, nil, nil
	})
	v, ctx := syncedView(t, client)
	waitFor(t, "the services watch opened after the refusals", func() bool {
		return statusOf(t, v, ResourceServices).WatchSuccess >= 1
	})
	st := statusOf(t, v, ResourceServices)
	if st.WatchError != 3 {
		t.Errorf("%d watch errors, want the 3 refusals", st.WatchError)
	}
	if st.ListSuccess != 1 || st.ListError != 0 {
		t.Errorf("lists: %d ok, %d errors; want 1 and 0: a refused watch is retried, not turned into a relist", st.ListSuccess, st.ListError)
	}
	// The watch works: a new Service arrives.
	if _, err := client.CoreV1().Services("shop").Create(ctx, localService("shop", "new", corev1.ServiceTypeNodePort), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new Service in the view", func() bool {
		snap, err := v.Snapshot()
		return err == nil && len(snap.Services) == 2
	})
}

func TestAPIServerAbsent(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, true},
		{&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.EHOSTUNREACH)}, true},
		{&net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, true},
		{errors.New("the server has received too many requests"), false},
		{errors.New("forbidden"), false},
	} {
		if got := apiServerAbsent(tc.err); got != tc.want {
			t.Errorf("apiServerAbsent(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
