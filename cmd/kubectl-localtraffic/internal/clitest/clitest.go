// Package clitest runs the plugin's verbs as a user would, for the tests of the verbs and of the plugin: an
// invocation over a fake clientset, the drill's objects, a fake of the announcers' API. Neither the binary nor a
// verb imports it.
package clitest

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/localtraffic/localtraffic-exporter/announce"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
)

// Result is one run: its exit status and what it wrote.
type Result struct {
	Code        int
	Out, ErrOut string
}

// Env is an invocation with stdin, an empty environment, no terminal and cs as its apiserver, writing to out
// and errOut.
func Env(stdin string, cs kubernetes.Interface, out, errOut *bytes.Buffer) *cli.Env {
	return &cli.Env{In: strings.NewReader(stdin), Out: out, ErrOut: errOut, Getenv: func(string) string { return "" },
		Client: func(*genericclioptions.ConfigFlags) (kubernetes.Interface, error) { return cs, nil }}
}

// Execute runs verbs with args on env and returns the exit status.
func Execute(env *cli.Env, args []string, verbs ...cli.Verb) int {
	return cli.Execute(context.Background(), env, args, verbs...)
}

// Invoke runs verbs with args as a user would, with stdin, an environment, a terminal or not and (for live mode)
// a fake apiserver holding objs.
func Invoke(t testing.TB, verbs []cli.Verb, stdin string, env map[string]string, terminal bool, objs []runtime.Object, args ...string) Result {
	t.Helper()
	var out, errOut bytes.Buffer
	e := Env(stdin, fake.NewClientset(objs...), &out, &errOut)
	e.Getenv, e.Terminal = func(k string) string { return env[k] }, terminal
	code := Execute(e, args, verbs...)
	return Result{code, out.String(), errOut.String()}
}

// InvokeAnnounced runs verbs with args against objs, the drill's Service made a LoadBalancer
// (AnnouncedLoadBalancer), with the announcers' records in dyn.
// The wait for a Cilium lease in doubt runs on a StepClock starting at the wall clock's now.
func InvokeAnnounced(t testing.TB, verbs []cli.Verb, objs []runtime.Object, dyn dynamic.Interface, args ...string) Result {
	t.Helper()
	return InvokeAnnouncedOn(t, verbs, objs, dyn, &StepClock{T: time.Now()}, args...)
}

// InvokeAnnouncedOn is InvokeAnnounced with the announcers' wait on clock.
func InvokeAnnouncedOn(t testing.TB, verbs []cli.Verb, objs []runtime.Object, dyn dynamic.Interface, clock cli.Clock, args ...string) Result {
	t.Helper()
	return InvokeWithAnnouncers(t, verbs, AnnouncedLoadBalancer(objs), dyn, clock, args...)
}

// InvokeWithAnnouncers is InvokeAnnouncedOn with objs as they are: a Service keeps its type.
func InvokeWithAnnouncers(t testing.TB, verbs []cli.Verb, objs []runtime.Object, dyn dynamic.Interface, clock cli.Clock, args ...string) Result {
	t.Helper()
	var out, errOut bytes.Buffer
	env := Env("", fake.NewClientset(objs...), &out, &errOut)
	env.Dynamic = func(*genericclioptions.ConfigFlags) (dynamic.Interface, error) { return dyn, nil }
	env.Clock = clock
	code := Execute(env, args, verbs...)
	return Result{code, out.String(), errOut.String()}
}

// StepClock is a test's time for the announcers' wait (cli.Clock): Sleep moves it on at once by what was
// asked, then calls Step (when set) with the new time, where a test makes the fake apiserver hold what a Cilium
// agent would have written by then. Slept is the time waited in all.
type StepClock struct {
	mu    sync.Mutex
	T     time.Time
	Step  func(now time.Time)
	Slept time.Duration
}

// Now is the clock's time.
func (c *StepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.T
}

// Sleep moves the clock on by d and runs Step; false when ctx has ended.
func (c *StepClock) Sleep(ctx context.Context, d time.Duration) bool {
	if ctx.Err() != nil {
		return false
	}
	c.mu.Lock()
	c.T = c.T.Add(d)
	c.Slept += d
	now, step := c.T, c.Step
	c.mu.Unlock()
	if step != nil {
		step(now)
	}
	return true
}

// CheckBadInput fails t unless r is bad input as the plugin reports it: exit 2, one line on stderr that names
// want, nothing on stdout.
func CheckBadInput(t testing.TB, r Result, want string) {
	t.Helper()
	if r.Code != cli.ExitError {
		t.Errorf("exit %d, want 2", r.Code)
	}
	if strings.Count(r.ErrOut, "\n") != 1 || !strings.Contains(r.ErrOut, want) || !strings.HasPrefix(r.ErrOut, "kubectl-localtraffic: ") {
		t.Errorf("stderr %q, want one line containing %q", r.ErrOut, want)
	}
	if r.Out != "" {
		t.Errorf("stdout %q", r.Out)
	}
}

// DrillObjects is the drill in a fake apiserver: the objects the controllers would have written, the
// Deployment pinned to node-1 or spread over the three nodes.
func DrillObjects(pinned bool) []runtime.Object {
	var objs []runtime.Object
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("node-%d", i)
		objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}}})
	}
	objs = append(objs, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kubelings", Name: "checkout"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ClusterIP: "10.96.0.10", Selector: map[string]string{"app": "checkout"},
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			Ports:                 []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, NodePort: 30090}}},
	})
	tmpl := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "checkout"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "checkout", Image: "agnhost"}}}}
	on := []string{"node-1", "node-1", "node-1"}
	if pinned {
		tmpl.Spec.NodeSelector = map[string]string{corev1.LabelHostname: "node-1"}
	} else {
		on = []string{"node-1", "node-2", "node-3"}
		tmpl.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelHostname,
			WhenUnsatisfiable: corev1.DoNotSchedule, NodeTaintsPolicy: ptr.To(corev1.NodeInclusionPolicyHonor),
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "checkout"}}}}
	}
	zero, one := ptr.To(intstr.FromInt32(0)), ptr.To(intstr.FromInt32(1))
	objs = append(objs, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kubelings", Name: "checkout", UID: "d-uid"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](3), Template: tmpl,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "checkout"}},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: zero, MaxUnavailable: one}}},
	}, &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kubelings", Name: "checkout-7c9f", UID: "rs-uid",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "checkout", UID: "d-uid", Controller: ptr.To(true)}}},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](3), Template: tmpl},
	})
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "kubelings", Name: "checkout-x1", Labels: map[string]string{discoveryv1.LabelServiceName: "checkout"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}},
	}
	for i, n := range on {
		name := fmt.Sprintf("checkout-7c9f-%d", i)
		objs = append(objs, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kubelings", Name: name, UID: types.UID(name),
			Labels:          map[string]string{"app": "checkout"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "checkout-7c9f", UID: "rs-uid", Controller: ptr.To(true)}}},
			Spec: corev1.PodSpec{NodeName: n}})
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.244.%d.10", i)},
			NodeName: ptr.To(n), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "kubelings", Name: name}})
	}
	return append(objs, slice)
}

// FakeAnnouncers is a fake dynamic client holding the announcers' objects, with the list kinds
// announce.List reads.
func FakeAnnouncers(objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		announce.GVRServiceL2Status: "ServiceL2StatusList", announce.GVRServiceBGPStatus: "ServiceBGPStatusList", announce.GVRLease: "LeaseList",
		announce.GVRPod: "PodList", announce.GVRCiliumL2Policy: "CiliumL2AnnouncementPolicyList",
	}, objs...)
}
