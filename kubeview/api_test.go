package kubeview

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// The REST API the exporter uses speaks to a server as the typed clients would: cluster-wide paths of the two
// groups, the list options in the query, protobuf asked for with JSON accepted (this server answers JSON, as an
// apiserver without protobuf for a resource would), watch streams decoded, API errors kept as such.
func TestRESTAPI(t *testing.T) {
	var accepts []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		accepts = append(accepts, r.Header.Get("Accept"))
		w.Header().Set("Content-Type", "application/json")
		q := r.URL.Query()
		switch {
		case r.URL.Path == "/api/v1/services" && q.Get("watch") == "":
			if q.Get("labelSelector") != "!service.kubernetes.io/service-proxy-name" {
				http.Error(w, "selector "+q.Get("labelSelector"), http.StatusBadRequest)
				return
			}
			fmt.Fprint(w, `{"kind":"ServiceList","apiVersion":"v1","metadata":{"resourceVersion":"7"},
				"items":[{"metadata":{"name":"web","namespace":"shop"},"spec":{"type":"NodePort","externalTrafficPolicy":"Local"}}]}`)
		case r.URL.Path == "/apis/discovery.k8s.io/v1/endpointslices" && q.Get("watch") == "true":
			fmt.Fprint(w, `{"type":"ADDED","object":{"kind":"EndpointSlice","apiVersion":"discovery.k8s.io/v1",
				"metadata":{"name":"web-1","namespace":"shop","resourceVersion":"8"},"addressType":"IPv4","endpoints":[]}}`+"\n")
		case r.URL.Path == "/api/v1/nodes/node-9":
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404,
				"details":{"name":"node-9","kind":"nodes"},"message":"nodes \"node-9\" not found"}`)
		default:
			http.Error(w, "unexpected "+r.URL.String(), http.StatusTeapot)
		}
	}))
	defer srv.Close()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "`+srv.URL+`"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	api, err := NewClient(kubeconfig, "test")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	obj, err := api.List(ctx, ResourceServices, metav1.ListOptions{LabelSelector: "!service.kubernetes.io/service-proxy-name"})
	if err != nil {
		t.Fatal(err)
	}
	if list, ok := obj.(*corev1.ServiceList); !ok || len(list.Items) != 1 || list.Items[0].Name != "web" || list.ResourceVersion != "7" {
		t.Errorf("List = %#v, want the one Service at resource version 7", obj)
	}

	w, err := api.Watch(ctx, ResourceEndpointSlices, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-w.ResultChan():
		if s, ok := e.Object.(*discoveryv1.EndpointSlice); e.Type != watch.Added || !ok || s.Name != "web-1" {
			t.Errorf("watch event %v %#v, want ADDED web-1", e.Type, e.Object)
		}
	case <-ctx.Done():
		t.Fatal("no watch event")
	}
	w.Stop()

	if _, err := api.Get(ctx, ResourceNodes, "node-9"); !apierrors.IsNotFound(err) {
		t.Errorf("Get of a missing Node: %v, want NotFound", err)
	}
	if _, err := api.List(ctx, "pods", metav1.ListOptions{}); err == nil {
		t.Error("a resource the view does not read must fail")
	}
	for _, a := range accepts {
		if !strings.HasPrefix(a, ContentTypeProtobuf) || !strings.Contains(a, "application/json") {
			t.Errorf("Accept %q: want protobuf first, JSON accepted", a)
		}
	}
}
