package check

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	sigsyaml "sigs.k8s.io/yaml"
)

// TestAuditRBAC: deploy/audit-rbac renders to the one ClusterRole localtraffic-audit, read-only (list only, no
// secrets, no wildcards). Which resources it lists is checked against the plugin's calls in
// cmd/kubectl-localtraffic/rbac_test.go.
func TestAuditRBAC(t *testing.T) {
	objs := render(t, "audit-rbac")
	if len(objs) != 1 {
		t.Fatalf("deploy/audit-rbac renders %d objects, want the ClusterRole alone", len(objs))
	}
	var role rbacv1.ClusterRole
	decode(t, find(t, objs, "ClusterRole", "localtraffic-audit"), &role)
	if role.AggregationRule != nil {
		t.Error("must not aggregate")
	}
	for _, r := range role.Rules {
		if !slices.Equal(r.Verbs, []string{"list"}) {
			t.Errorf("rule %+v: verbs %v, want list only", r, r.Verbs)
		}
		for _, res := range r.Resources {
			if res == "*" || res == "secrets" || strings.Contains(res, "/") {
				t.Errorf("rule grants %q", res)
			}
		}
		if slices.Contains(r.APIGroups, "*") {
			t.Errorf("wildcard API group in %+v", r)
		}
	}
}

// krewPlugin is the part of krew's Plugin (krew.googlecontainertools.github.com/v1alpha2) the index validates.
type krewPlugin struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string `json:"version"`
		Homepage         string `json:"homepage"`
		ShortDescription string `json:"shortDescription"`
		Description      string `json:"description"`
		Caveats          string `json:"caveats"`
		Platforms        []struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			URI    string `json:"uri"`
			Sha256 string `json:"sha256"`
			Bin    string `json:"bin"`
		} `json:"platforms"`
	} `json:"spec"`
}

// TestKrewManifest renders deploy/krew/localtraffic.yaml as krew-release-bot would for a tag and checks what
// krew's index requires: the plugin name, a semver version, a short description under krew's length limit,
// and per platform an os/arch selector, the release archive's uri and sha256, and the bin kubectl runs.
func TestKrewManifest(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "krew", "localtraffic.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	const tag = "v1.2.3"
	s := regexp.MustCompile(`\{\{addURIAndSha "([^"]+)" \.TagName \}\}`).ReplaceAllStringFunc(string(b), func(m string) string {
		uri := regexp.MustCompile(`"([^"]+)"`).FindStringSubmatch(m)[1]
		return "uri: " + uri + "\n    sha256: " + strings.Repeat("ab", 32)
	})
	s = strings.ReplaceAll(s, "{{ .TagName }}", tag)
	if strings.Contains(s, "{{") {
		t.Fatalf("template directives left after rendering:\n%s", s)
	}
	var p krewPlugin
	if err := sigsyaml.UnmarshalStrict([]byte(s), &p); err != nil {
		t.Fatalf("rendered manifest: %v", err)
	}
	if p.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || p.Kind != "Plugin" || p.Metadata.Name != "localtraffic" {
		t.Errorf("header %s %s %s", p.APIVersion, p.Kind, p.Metadata.Name)
	}
	if p.Spec.Version != tag || len(p.Spec.ShortDescription) > 50 || p.Spec.Description == "" || p.Spec.Homepage == "" {
		t.Errorf("spec %+v (shortDescription %d chars)", p.Spec, len(p.Spec.ShortDescription))
	}
	seen := map[string]bool{}
	for _, pl := range p.Spec.Platforms {
		key := pl.Selector.MatchLabels["os"] + "/" + pl.Selector.MatchLabels["arch"]
		seen[key] = true
		if pl.Bin != "kubectl-localtraffic" || !strings.Contains(pl.URI, "/"+tag+"/kubectl-localtraffic_"+tag+"_"+strings.ReplaceAll(key, "/", "_")+".tar.gz") || len(pl.Sha256) != 64 {
			t.Errorf("platform %s: %+v", key, pl)
		}
	}
	for _, want := range []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"} {
		if !seen[want] {
			t.Errorf("no %s platform", want)
		}
	}
}
