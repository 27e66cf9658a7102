package nodeprobe_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/localtraffic/localtraffic-exporter/nodeprobe"
)

// TestProbesReportAlike: both probes of kube-proxy's servers time themselves and name the server and the URL in
// their error, whether the request got no answer (refused) or an answer that is not kube-proxy's.
func TestProbesReportAlike(t *testing.T) {
	client := nodeprobe.NewHTTPClient()
	garbage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusTeapot)
	}))
	defer garbage.Close()
	for _, tc := range []struct {
		name, hostPort string
		want           nodeprobe.Result
	}{
		{"refused", refusedAddress(t), nodeprobe.ResultRefused},
		{"not kube-proxy", strings.TrimPrefix(garbage.URL, "http://"), nodeprobe.ResultInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			host, port := splitHostPort(tc.hostPort)
			hc := nodeprobe.ProbeHealthCheckNodePort(context.Background(), client, host, port, "kubelings", "web")
			kp := nodeprobe.ProbeKubeProxy(context.Background(), client, tc.hostPort, nodeprobe.PathLivez)
			for _, got := range []struct {
				result   nodeprobe.Result
				err      error
				prefix   string
				duration bool
			}{
				{hc.Result, hc.Err, "health check http://" + tc.hostPort + "/: ", hc.Duration > 0},
				{kp.Result, kp.Err, "kube-proxy http://" + tc.hostPort + "/livez: ", kp.Duration > 0},
			} {
				if got.result != tc.want {
					t.Errorf("result %q, want %q", got.result, tc.want)
				}
				if got.err == nil || !strings.HasPrefix(got.err.Error(), got.prefix) {
					t.Errorf("error %v, want it to start with %q", got.err, got.prefix)
				}
				if !got.duration {
					t.Errorf("%s: no duration recorded", got.prefix)
				}
			}
		})
	}
}
