// Package nodeagent plays the kubelet for one node of the e2e harness: it keeps the Node Ready (status and the
// node Lease, so the node lifecycle controller leaves it alone), watches the Pods bound to the node, gives each
// a network and a stand-in for its containers through a Sandbox (the harness wires a network namespace with an
// address from the node's pod CIDRs and serves HTTP on every container port, answering the pod's name), reports
// it Running and Ready with its IPs, and on deletion keeps it serving and its readiness as it was (through its
// preStop sleep, as the kubelet runs the hook while the containers run) for its grace period, or until its SIGTERM
// when ExitOnTermAnnotation says so, then reports it not ready (its containers exited) and a moment later (ExitedFor) tears it down and deletes the Pod object with
// grace 0, as a kubelet does.
//
// What it is not: no images, no processes, no probes, no volumes, no restarts, no resource accounting.
// Readiness is what the annotation ReadyAnnotation says (absent means ready), so tests can fail it on demand,
// and never before the containers' readiness probes' initialDelaySeconds since the pod started (the kubelet
// does not probe before then, and a pod is not ready until a probe succeeds).
package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
)

// ReadyAnnotation set to "false" on a Pod makes the agent report it not ready (its readiness probe failing);
// removing it (or any other value) makes it ready again.
const ReadyAnnotation = "e2e.localtraffic.io/ready"

// ExitOnTermAnnotation set to "true" on a Pod makes its stand-ins an application that exits as soon as it gets
// SIGTERM, which the kubelet sends when the containers' preStop hooks end (at once without one), instead of
// one that drains until its grace period ends (the default).
const ExitOnTermAnnotation = "e2e.localtraffic.io/exit-on-sigterm"

// LeaseNamespace holds the node Leases (the kubelet's heartbeat).
const LeaseNamespace = "kube-node-lease"

// Sandbox runs a pod: its network and the stand-ins for its containers.
type Sandbox interface {
	// Start gives the pod namespace/name the addresses addrs (one per pod CIDR of the node, every family
	// there) and serves HTTP on each port, answering with the pod's name. It returns the addresses the pod
	// actually got, which the agent reports as status.podIPs (a sandbox may wire only some families).
	Start(ctx context.Context, namespace, name string, addrs []string, ports []int) ([]string, error)
	// Stop stops the pod's servers and removes its network. Stopping a pod that does not run is not an error.
	Stop(ctx context.Context, namespace, name string) error
}

// Config configures an Agent.
type Config struct {
	// NodeName is the Node the agent keeps alive and whose Pods it runs.
	NodeName string
	// Client should carry the node's own credentials (system:node:<name>), so the Node authorizer checks it.
	Client  kubernetes.Interface
	Sandbox Sandbox
	// LeaseDuration is the node Lease's duration (default 40s, the kubelet's); the Lease is renewed every
	// RenewInterval (default LeaseDuration/4).
	LeaseDuration, RenewInterval time.Duration
	// StatusInterval is how often the Ready condition's heartbeat is refreshed (default 1m; with a Lease the
	// node lifecycle controller needs no more).
	StatusInterval time.Duration
	// ExitedFor is how long a deleted pod whose grace period ended stays listed not ready, its containers
	// exited, before the agent tears it down and deletes the object (default 2.5s): the kubelet reports the
	// exit, then cleans up and deletes, and the EndpointSlice controller lists the endpoint terminating and not
	// serving meanwhile. The default outlasts kube-proxy's minSyncPeriod (1 s: a sync just before the exit
	// holds the next one back that long) and the controllers' latency on a loaded machine, so kube-proxy has
	// dropped or moved the endpoint before its stand-in stops answering: with 1 s, a rollout's first lost
	// attempts were now and then the torn-down pod's, ahead of kube-proxy's drop.
	ExitedFor time.Duration
	// Logf receives one line per notable event; nil discards them.
	Logf func(format string, args ...any)
}

// Agent is one node's agent. Run it with Run.
type Agent struct {
	cfg      Config
	nodeIP   string
	prefixes []netip.Prefix
	alloc    allocator
	queue    workqueue.TypedRateLimitingInterface[string]
	lister   corelisters.PodLister

	mu   sync.Mutex
	pods map[string]*podState // by namespace/name: pods whose sandbox runs
	// exited are the deleted pods the agent reported exited at the end of their grace period, by
	// namespace/name, with when: they are torn down and deleted ExitedFor later.
	exited map[string]time.Time
}

type podState struct {
	uid     types.UID
	offset  int
	ips     []string
	started metav1.Time
}

// New returns an agent for cfg.
func New(cfg Config) (*Agent, error) {
	if cfg.NodeName == "" || cfg.Client == nil || cfg.Sandbox == nil {
		return nil, errors.New("nodeagent: NodeName, Client and Sandbox are required")
	}
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = 40 * time.Second
	}
	if cfg.RenewInterval == 0 {
		cfg.RenewInterval = cfg.LeaseDuration / 4
	}
	if cfg.StatusInterval == 0 {
		cfg.StatusInterval = time.Minute
	}
	if cfg.ExitedFor == 0 {
		cfg.ExitedFor = 2500 * time.Millisecond
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	return &Agent{cfg: cfg, pods: map[string]*podState{}, exited: map[string]time.Time{}}, nil
}

func (a *Agent) logf(format string, args ...any) {
	a.cfg.Logf("nodeagent %s: "+format, append([]any{a.cfg.NodeName}, args...)...)
}

// Run registers the node's capacity and Ready condition, then keeps the Lease and the node's pods until ctx
// ends. It returns an error only when it cannot start; later failures are logged and retried.
func (a *Agent) Run(ctx context.Context) error {
	node, err := a.cfg.Client.CoreV1().Nodes().Get(ctx, a.cfg.NodeName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("nodeagent %s: get node: %w", a.cfg.NodeName, err)
	}
	if err := a.readNode(node); err != nil {
		return err
	}
	if err := a.updateNodeStatus(ctx, true); err != nil {
		return err
	}
	if err := a.renewLease(ctx, node); err != nil {
		return err
	}

	factory := informers.NewSharedInformerFactoryWithOptions(a.cfg.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", a.cfg.NodeName).String()
		}))
	podInformer := factory.Core().V1().Pods()
	a.lister = podInformer.Lister()
	a.queue = workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 5*time.Second))
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			a.queue.Add(key)
		}
	}
	if _, err := podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}); err != nil {
		return fmt.Errorf("nodeagent %s: pod handler: %w", a.cfg.NodeName, err)
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), podInformer.Informer().HasSynced) {
		return fmt.Errorf("nodeagent %s: pod cache did not sync: %w", a.cfg.NodeName, ctx.Err())
	}

	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() { defer wg.Done(); a.work(ctx) }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); a.heartbeat(ctx, node) }()
	<-ctx.Done()
	a.queue.ShutDown()
	wg.Wait()
	return nil
}

// readNode takes the node's InternalIP and its pod CIDRs (every family in spec.podCIDRs).
func (a *Agent) readNode(node *corev1.Node) error {
	for _, addr := range node.Status.Addresses {
		if addr.Type == corev1.NodeInternalIP && a.nodeIP == "" {
			a.nodeIP = addr.Address
		}
	}
	cidrs := node.Spec.PodCIDRs
	if len(cidrs) == 0 && node.Spec.PodCIDR != "" {
		cidrs = []string{node.Spec.PodCIDR}
	}
	if len(cidrs) == 0 {
		return fmt.Errorf("nodeagent %s: node has no spec.podCIDRs", a.cfg.NodeName)
	}
	a.prefixes = nil
	for _, s := range cidrs {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return fmt.Errorf("nodeagent %s: pod CIDR %q: %w", a.cfg.NodeName, s, err)
		}
		a.prefixes = append(a.prefixes, p.Masked())
	}
	a.alloc = newAllocator(a.prefixes)
	return nil
}

func (a *Agent) heartbeat(ctx context.Context, node *corev1.Node) {
	lease := time.NewTicker(a.cfg.RenewInterval)
	defer lease.Stop()
	status := time.NewTicker(a.cfg.StatusInterval)
	defer status.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-lease.C:
			if err := a.renewLease(ctx, node); err != nil && ctx.Err() == nil {
				a.logf("renew lease: %v", err)
			}
		case <-status.C:
			if err := a.updateNodeStatus(ctx, false); err != nil && ctx.Err() == nil {
				a.logf("node status: %v", err)
			}
		}
	}
}

// updateNodeStatus sets the Ready condition's heartbeat and, on the first call, the node's capacity, the other
// conditions a kubelet reports and its system info. The addresses the harness registered stay.
func (a *Agent) updateNodeStatus(ctx context.Context, first bool) error {
	nodes := a.cfg.Client.CoreV1().Nodes()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := nodes.Get(ctx, a.cfg.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		if first {
			capacity := corev1.ResourceList{
				corev1.ResourceCPU:              resource.MustParse("4"),
				corev1.ResourceMemory:           resource.MustParse("8Gi"),
				corev1.ResourcePods:             resource.MustParse("110"),
				corev1.ResourceEphemeralStorage: resource.MustParse("20Gi"),
			}
			node.Status.Capacity = capacity
			node.Status.Allocatable = capacity.DeepCopy()
			node.Status.NodeInfo = corev1.NodeSystemInfo{
				KubeletVersion:          "v1.37.2+e2e-nodeagent",
				OperatingSystem:         "linux",
				Architecture:            runtime.GOARCH,
				ContainerRuntimeVersion: "e2e-nodeagent://1",
				OSImage:                 "localtraffic e2e node (network namespace)",
			}
			for _, c := range []struct {
				t      corev1.NodeConditionType
				reason string
			}{
				{corev1.NodeMemoryPressure, "KubeletHasSufficientMemory"},
				{corev1.NodeDiskPressure, "KubeletHasNoDiskPressure"},
				{corev1.NodePIDPressure, "KubeletHasSufficientPID"},
			} {
				setNodeCondition(node, corev1.NodeCondition{Type: c.t, Status: corev1.ConditionFalse, Reason: c.reason}, now)
			}
		}
		setNodeCondition(node, corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
			Reason: "KubeletReady", Message: "e2e node agent is posting ready status"}, now)
		_, err = nodes.UpdateStatus(ctx, node, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("nodeagent %s: update node status: %w", a.cfg.NodeName, err)
	}
	return nil
}

func setNodeCondition(node *corev1.Node, c corev1.NodeCondition, now metav1.Time) {
	c.LastHeartbeatTime = now
	for i := range node.Status.Conditions {
		cur := &node.Status.Conditions[i]
		if cur.Type != c.Type {
			continue
		}
		c.LastTransitionTime = cur.LastTransitionTime
		if cur.Status != c.Status {
			c.LastTransitionTime = now
		}
		*cur = c
		return
	}
	c.LastTransitionTime = now
	node.Status.Conditions = append(node.Status.Conditions, c)
}

// renewLease creates or renews the node's Lease in kube-node-lease, owned by the Node like the kubelet's.
func (a *Agent) renewLease(ctx context.Context, node *corev1.Node) error {
	leases := a.cfg.Client.CoordinationV1().Leases(LeaseNamespace)
	now := metav1.NewMicroTime(time.Now())
	secs := int32(a.cfg.LeaseDuration / time.Second)
	l, err := leases.Get(ctx, a.cfg.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		holder := a.cfg.NodeName
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Name: a.cfg.NodeName, Namespace: LeaseNamespace,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}},
			},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, RenewTime: &now},
		}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	l.Spec.RenewTime = &now
	l.Spec.LeaseDurationSeconds = &secs
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	return err
}

func (a *Agent) work(ctx context.Context) {
	for {
		key, shutdown := a.queue.Get()
		if shutdown {
			return
		}
		if err := a.sync(ctx, key); err != nil {
			if ctx.Err() == nil {
				a.logf("pod %s: %v (retrying)", key, err)
				a.queue.AddRateLimited(key)
			}
		} else {
			a.queue.Forget(key)
		}
		a.queue.Done(key)
	}
}

// sync brings one pod's sandbox and status in line with its object.
func (a *Agent) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pod, err := a.lister.Pods(ns).Get(name)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	a.mu.Lock()
	st := a.pods[key]
	a.mu.Unlock()
	if pod == nil || (st != nil && st.uid != pod.UID) {
		// Gone (deleted with grace 0, by us or anyone), or replaced by a pod of the same name.
		if st != nil {
			if err := a.stop(ctx, key, ns, name); err != nil {
				return err
			}
		}
		if pod == nil {
			return nil
		}
		st = nil
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		if st != nil {
			return a.stop(ctx, key, ns, name)
		}
		return nil
	}
	if pod.DeletionTimestamp != nil {
		if st != nil {
			// Terminating: the stand-ins keep serving, their readiness as it was (the kubelet runs the
			// preStop hooks while the containers run, and keeps probing), so the EndpointSlice controller
			// lists the endpoint serving and terminating until they exit (servingUntil).
			if left := time.Until(servingUntil(pod)); left > 0 {
				a.queue.AddAfter(key, left)
				return nil
			}
			a.mu.Lock()
			_, reported := a.exited[key]
			a.mu.Unlock()
			if !reported {
				// Its containers exited: the kubelet reports them so (not ready: the endpoint terminating and no
				// longer serving) before it cleans up and deletes the object. The stand-ins still answer until
				// the cleanup, where a real pod's network would refuse: a connection kube-proxy forwards there
				// before its sync is served, so that kube-proxy's drop is the only loss these pods' clients see.
				p := pod.DeepCopy()
				p.Status = *exitedStatus(desiredStatus(pod, st, a.nodeIP, false))
				if _, err := a.cfg.Client.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
					return fmt.Errorf("report exited: %w", err)
				}
				a.mu.Lock()
				a.exited[key] = time.Now()
				a.mu.Unlock()
				a.logf("pod %s: grace period over, exited", key)
			}
			a.mu.Lock()
			at := a.exited[key]
			a.mu.Unlock()
			if left := a.cfg.ExitedFor - time.Since(at); left > 0 {
				a.queue.AddAfter(key, left)
				return nil
			}
			if err := a.stop(ctx, key, ns, name); err != nil {
				return err
			}
			a.logf("pod %s: stopped", key)
		}
		// The kubelet's last word: remove the object now that nothing runs.
		uid := pod.UID
		err := a.cfg.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{
			GracePeriodSeconds: new(int64), Preconditions: &metav1.Preconditions{UID: &uid},
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("delete: %w", err)
		}
		a.mu.Lock()
		delete(a.exited, key)
		a.mu.Unlock()
		return nil
	}
	if st == nil {
		if st, err = a.start(ctx, key, pod); err != nil {
			return err
		}
	}
	return a.syncStatus(ctx, key, pod, st)
}

func (a *Agent) start(ctx context.Context, key string, pod *corev1.Pod) (*podState, error) {
	offset, addrs, err := a.alloc.take()
	if err != nil {
		return nil, fmt.Errorf("allocate address: %w", err)
	}
	var ports []int
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.Protocol == "" || p.Protocol == corev1.ProtocolTCP {
				ports = append(ports, int(p.ContainerPort))
			}
		}
	}
	ips, err := a.cfg.Sandbox.Start(ctx, pod.Namespace, pod.Name, addrs, ports)
	if err != nil {
		a.alloc.release(offset)
		return nil, fmt.Errorf("start sandbox: %w", err)
	}
	st := &podState{uid: pod.UID, offset: offset, ips: ips, started: metav1.Now()}
	a.mu.Lock()
	a.pods[key] = st
	a.mu.Unlock()
	a.logf("pod %s: running with %v", key, ips)
	return st, nil
}

func (a *Agent) stop(ctx context.Context, key, ns, name string) error {
	if err := a.cfg.Sandbox.Stop(ctx, ns, name); err != nil {
		return fmt.Errorf("stop sandbox: %w", err)
	}
	a.mu.Lock()
	if st := a.pods[key]; st != nil {
		a.alloc.release(st.offset)
		delete(a.pods, key)
	}
	delete(a.exited, key)
	a.mu.Unlock()
	return nil
}

// syncStatus reports the pod Running with its IPs, Ready unless ReadyAnnotation says "false" or its readiness
// probes' initial delay has not passed since it started (then it looks again when it has).
func (a *Agent) syncStatus(ctx context.Context, key string, pod *corev1.Pod, st *podState) error {
	ready := pod.Annotations[ReadyAnnotation] != "false"
	if left := readinessDelay(pod) - time.Since(st.started.Time); ready && left > 0 {
		ready = false
		a.queue.AddAfter(key, left)
	}
	want := desiredStatus(pod, st, a.nodeIP, ready)
	if statusEqual(&pod.Status, want) {
		return nil
	}
	p := pod.DeepCopy()
	p.Status = *want
	if _, err := a.cfg.Client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update status: %w", err)
	}
	return nil
}

// servingUntil is when a deleted pod's containers exit. The kubelet runs each container's preStop hook first,
// out of the deletion's grace period (cut at its end), then sends SIGTERM with what the grace period has left,
// then SIGKILL. The stand-ins drain until the grace period ends (pod.DeletionTimestamp) unless
// ExitOnTermAnnotation makes them exit on SIGTERM: then they exit when the shortest preStop sleep ends (the first
// container to exit ends the pod's serving; a container without a sleep hook gets SIGTERM at once, and an exec
// or HTTP hook the agent cannot run counts as none). The API keeps deletionTimestamp in whole seconds, cut down:
// the stand-ins stop up to a second early, never late, so a scenario's preStop is never credited with more.
func servingUntil(pod *corev1.Pod) time.Time {
	end := pod.DeletionTimestamp.Time
	if pod.Annotations[ExitOnTermAnnotation] != "true" || pod.DeletionGracePeriodSeconds == nil {
		return end
	}
	grace := time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	hook := grace
	for _, c := range pod.Spec.Containers {
		var sleep time.Duration
		if l := c.Lifecycle; l != nil && l.PreStop != nil && l.PreStop.Sleep != nil {
			sleep = time.Duration(l.PreStop.Sleep.Seconds) * time.Second
		}
		hook = min(hook, sleep)
	}
	return end.Add(hook - grace)
}

// readinessDelay is the longest initialDelaySeconds of the pod's containers' readiness probes.
func readinessDelay(pod *corev1.Pod) time.Duration {
	var d time.Duration
	for _, c := range pod.Spec.Containers {
		if p := c.ReadinessProbe; p != nil {
			d = max(d, time.Duration(p.InitialDelaySeconds)*time.Second)
		}
	}
	return d
}

// exitedStatus is s with every container exited on its SIGTERM (exit code 143) and the pod not ready; the
// phase stays Running until the object is deleted.
func exitedStatus(s *corev1.PodStatus) *corev1.PodStatus {
	now := metav1.Now()
	for i := range s.ContainerStatuses {
		cs := &s.ContainerStatuses[i]
		started := cs.State.Running.StartedAt
		cs.Ready, cs.Started = false, new(bool)
		cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 143, Reason: "Error",
			StartedAt: started, FinishedAt: now, ContainerID: cs.ContainerID}}
	}
	return s
}

func desiredStatus(pod *corev1.Pod, st *podState, nodeIP string, ready bool) *corev1.PodStatus {
	now := metav1.Now()
	s := pod.Status.DeepCopy()
	s.Phase = corev1.PodRunning
	s.HostIP = nodeIP
	s.HostIPs = []corev1.HostIP{{IP: nodeIP}}
	s.PodIPs = nil
	for _, ip := range st.ips {
		s.PodIPs = append(s.PodIPs, corev1.PodIP{IP: ip})
	}
	s.PodIP = ""
	if len(st.ips) > 0 {
		s.PodIP = st.ips[0]
	}
	started := st.started
	s.StartTime = &started
	readyStatus := corev1.ConditionFalse
	if ready {
		readyStatus = corev1.ConditionTrue
	}
	setPodCondition(s, corev1.PodReadyToStartContainers, corev1.ConditionTrue, now)
	setPodCondition(s, corev1.PodInitialized, corev1.ConditionTrue, now)
	setPodCondition(s, corev1.ContainersReady, readyStatus, now)
	setPodCondition(s, corev1.PodReady, readyStatus, now)
	s.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		startedTrue := true
		s.ContainerStatuses = append(s.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image,
			ContainerID: fmt.Sprintf("e2e://%s-%s", pod.UID, c.Name),
			Ready:       ready, Started: &startedTrue,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}},
		})
	}
	return s
}

func setPodCondition(s *corev1.PodStatus, t corev1.PodConditionType, status corev1.ConditionStatus, now metav1.Time) {
	for i := range s.Conditions {
		if s.Conditions[i].Type == t {
			if s.Conditions[i].Status != status {
				s.Conditions[i].Status = status
				s.Conditions[i].LastTransitionTime = now
				s.Conditions[i].Reason, s.Conditions[i].Message = "", ""
			}
			return
		}
	}
	s.Conditions = append(s.Conditions, corev1.PodCondition{Type: t, Status: status, LastTransitionTime: now})
}

// statusEqual compares what the agent decides (phase, addresses, conditions' states, container readiness).
func statusEqual(cur, want *corev1.PodStatus) bool {
	if cur.Phase != want.Phase || cur.PodIP != want.PodIP || len(cur.PodIPs) != len(want.PodIPs) ||
		cur.HostIP != want.HostIP || len(cur.ContainerStatuses) != len(want.ContainerStatuses) {
		return false
	}
	for i := range want.PodIPs {
		if cur.PodIPs[i] != want.PodIPs[i] {
			return false
		}
	}
	for i := range want.ContainerStatuses {
		if cur.ContainerStatuses[i].Ready != want.ContainerStatuses[i].Ready || cur.ContainerStatuses[i].State.Running == nil {
			return false
		}
	}
	for _, w := range want.Conditions {
		found := false
		for _, c := range cur.Conditions {
			if c.Type == w.Type {
				found = c.Status == w.Status
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}
