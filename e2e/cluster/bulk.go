package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Bulk is many Services, each with one EndpointSlice, as the scale tests (Population, ScaleServices) and the
// soak's churn want them: Service and Slice say what the i-th pair is, CreateBulk writes them.
type Bulk struct {
	Namespace string
	// Service is the i-th Service (NewService with the set's options).
	Service func(i int) *corev1.Service
	// Slice is the i-th Service's EndpointSlice, given the Service as created (its UID owns the slice).
	Slice func(svc *corev1.Service, i int) *discoveryv1.EndpointSlice
	// Status, when set and not nil for i, is written to the i-th Service's status after it is created (a load
	// balancer's ingress, as a cloud controller writes it): kube-proxy programs what the status says.
	Status func(i int) *corev1.ServiceStatus
	// Workers writing concurrently; 0: 8 (more starve etcd on a 2-core machine: "request timed out").
	Workers int
}

// CreateBulk creates the Services from (inclusive) to to (exclusive) with their slices, Workers at a time,
// through a client of its own (bulkClient: the admin client's 100 QPS would make 20,000 writes take minutes).
// Objects that exist already are left as they are, so a set grows by calling it again; what a busy apiserver
// answers (timeouts, throttling) is retried.
func (c *Cluster) CreateBulk(ctx context.Context, b Bulk, from, to int) error {
	if err := c.EnsureNamespace(ctx, b.Namespace); err != nil {
		return err
	}
	client, err := c.bulkClient()
	if err != nil {
		return err
	}
	workers := b.Workers
	if workers <= 0 {
		workers = 8
	}
	return forEach(ctx, workers, from, to, func(ctx context.Context, i int) error {
		return createBulkPair(ctx, client, b, i)
	})
}

func createBulkPair(ctx context.Context, client kubernetes.Interface, b Bulk, i int) error {
	svc := b.Service(i)
	services := client.CoreV1().Services(b.Namespace)
	var created *corev1.Service
	err := retryTransient(ctx, func() error {
		var err error
		created, err = services.Create(ctx, svc, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) { // an earlier attempt or call went through
			created, err = services.Get(ctx, svc.Name, metav1.GetOptions{})
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("create Service %s/%s: %w", b.Namespace, svc.Name, err)
	}
	if b.Status != nil {
		if st := b.Status(i); st != nil {
			created.Status = *st
			err = retryTransient(ctx, func() error {
				updated, err := services.UpdateStatus(ctx, created, metav1.UpdateOptions{})
				if apierrors.IsConflict(err) { // an earlier attempt went through, or the object is older
					fresh, getErr := services.Get(ctx, svc.Name, metav1.GetOptions{})
					if getErr != nil {
						return getErr
					}
					fresh.Status = *st
					updated, err = services.UpdateStatus(ctx, fresh, metav1.UpdateOptions{})
				}
				if err == nil {
					created = updated
				}
				return err
			})
			if err != nil {
				return fmt.Errorf("write the status of Service %s/%s: %w", b.Namespace, svc.Name, err)
			}
		}
	}
	slice := b.Slice(created, i)
	err = retryTransient(ctx, func() error {
		_, err := client.DiscoveryV1().EndpointSlices(b.Namespace).Create(ctx, slice, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("create EndpointSlice %s/%s: %w", b.Namespace, slice.Name, err)
	}
	return nil
}

// bulkClient is an admin clientset for bulk writes: protobuf (a fraction of JSON's encoding work on both ends)
// and no client-side rate limit worth the name (the apiserver's own max-in-flight limits still apply).
func (c *Cluster) bulkClient() (*kubernetes.Clientset, error) {
	cfg := c.AdminRESTConfig()
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cfg.QPS, cfg.Burst = 2000, 4000
	cfg.Timeout = 2 * time.Minute
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("bulk client: %w", err)
	}
	return client, nil
}

// forEach runs fn for every i from (inclusive) to to (exclusive), workers at a time. The first error cancels
// the rest; every error is returned, and ctx's own end when nothing else failed.
func forEach(ctx context.Context, workers, from, to int, fn func(ctx context.Context, i int) error) error {
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	work := make(chan int)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range work {
				if err := fn(ctx, i); err != nil {
					errs <- err
					cancel()
					return
				}
			}
		})
	}
feed:
	for i := from; i < to; i++ {
		select {
		case work <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	if len(all) == 0 && parent.Err() != nil {
		all = append(all, fmt.Errorf("not every item done: %w", parent.Err()))
	}
	return errors.Join(all...)
}

// retryTransient runs fn up to 6 times while it fails with what a busy apiserver or etcd answers (timeouts,
// throttling, "etcdserver: request timed out" inside an Invalid), waiting 1, 2, 4 … s in between.
func retryTransient(ctx context.Context, fn func() error) error {
	var err error
	for attempt, wait := 0, time.Second; attempt < 6; attempt, wait = attempt+1, wait*2 {
		if err = fn(); err == nil || !transient(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(wait):
		}
	}
	return err
}

func transient(err error) bool {
	if apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err) {
		return true
	}
	msg := err.Error()
	for _, m := range []string{"request timed out", "Client.Timeout", "context deadline exceeded", "connection refused", "unexpected error when reading response body"} {
		if strings.Contains(msg, m) {
			return true
		}
	}
	return false
}
