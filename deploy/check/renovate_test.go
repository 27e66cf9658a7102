package check

// Renovate keeps every pin of the repository current: its own managers read the go.mod files, the workflows'
// actions, the Dockerfiles and the images of the chart and the kustomize base; its regex manager reads the pins
// nothing else can (the tools scripts/install-deps.sh builds, go.work, the operator's CRD release e2e installs).
// These tests hold .github/renovate.json to that: they run its regexes, as Go's RE2 (the engine Renovate uses),
// over the files, and look for every pin themselves.

import (
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

type renovateConfig struct {
	EnabledManagers []string `json:"enabledManagers"`
	IgnorePaths     []string `json:"ignorePaths"`
	Kubernetes      struct {
		ManagerFilePatterns []string `json:"managerFilePatterns"`
	} `json:"kubernetes"`
	CustomManagers []struct {
		CustomType          string   `json:"customType"`
		ManagerFilePatterns []string `json:"managerFilePatterns"`
		MatchStrings        []string `json:"matchStrings"`
		DatasourceTemplate  string   `json:"datasourceTemplate"`
		DepNameTemplate     string   `json:"depNameTemplate"`
	} `json:"customManagers"`
	PackageRules []struct {
		MatchManagers  []string `json:"matchManagers"`
		MatchFileNames []string `json:"matchFileNames"`
		MatchDepNames  []string `json:"matchDepNames"`
		MatchDepTypes  []string `json:"matchDepTypes"`
		MatchPackages  []string `json:"matchPackageNames"`
		Enabled        *bool    `json:"enabled"`
	} `json:"packageRules"`
}

// Renovate's own default file patterns of the managers the config relies on (each manager's documented
// managerFilePatterns); the kubernetes manager has none and is given its own.
var renovateDefaultPatterns = map[string][]string{
	"gomod":          {`(^|/)go\.mod$`},
	"dockerfile":     {`(^|/|\.)([Dd]ocker|[Cc]ontainer)file$`, `(^|/)([Dd]ocker|[Cc]ontainer)file[^/]*$`},
	"github-actions": {`(^|/)(workflow-templates|\.(?:github|gitea|forgejo)/(?:workflows|actions))/.+\.ya?ml$`},
	"helm-values":    {`(^|/)values\.ya?ml$`},
}

func readRenovate(t *testing.T) renovateConfig {
	t.Helper()
	var cfg renovateConfig
	if err := json.Unmarshal(mustRead(t, ".github/renovate.json"), &cfg); err != nil {
		t.Fatalf(".github/renovate.json: %v", err)
	}
	return cfg
}

// filePatterns compiles managerFilePatterns; each must be a regex (/.../), which is how this config writes them.
func filePatterns(t *testing.T, patterns []string) []*regexp.Regexp {
	t.Helper()
	var out []*regexp.Regexp
	for _, p := range patterns {
		body, ok := strings.CutPrefix(p, "/")
		body, ok2 := strings.CutSuffix(body, "/")
		if !ok || !ok2 {
			t.Fatalf("managerFilePatterns %q: want a /regex/ (a glob cannot be run here)", p)
		}
		re, err := regexp.Compile(body)
		if err != nil {
			t.Fatalf("managerFilePatterns %q: %v", p, err)
		}
		out = append(out, re)
	}
	return out
}

func matchesAny(res []*regexp.Regexp, path string) bool {
	return slices.ContainsFunc(res, func(re *regexp.Regexp) bool { return re.MatchString(path) })
}

func trackedFiles(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("git", "-C", repoRoot(t), "ls-files").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	return strings.Fields(string(out))
}

// renovatePin is one dependency a regex manager reads: where its version is in the file.
type renovatePin struct {
	datasource, depName, version string
	start, end                   int
}

// regexPins runs every custom regex manager over every tracked file its patterns select, as Renovate does (each
// matchString over the whole file, every match), and returns the pins by file.
func regexPins(t *testing.T, cfg renovateConfig) map[string][]renovatePin {
	t.Helper()
	pins := map[string][]renovatePin{}
	files := trackedFiles(t)
	for i, m := range cfg.CustomManagers {
		if m.CustomType != "regex" {
			t.Fatalf("customManagers[%d]: type %q, want regex", i, m.CustomType)
		}
		if len(m.MatchStrings) == 0 {
			t.Fatalf("customManagers[%d] has no matchStrings", i)
		}
		pats := filePatterns(t, m.ManagerFilePatterns)
		for _, ms := range m.MatchStrings {
			re, err := regexp.Compile(ms)
			if err != nil {
				t.Fatalf("customManagers[%d] matchString %q is not RE2: %v", i, ms, err)
			}
			cv := re.SubexpIndex("currentValue")
			if cv < 0 || (re.SubexpIndex("depName") < 0 && m.DepNameTemplate == "") ||
				(re.SubexpIndex("datasource") < 0 && m.DatasourceTemplate == "") {
				t.Fatalf("customManagers[%d] matchString %q: want currentValue, depName and datasource", i, ms)
			}
			for _, f := range files {
				if !matchesAny(pats, f) {
					continue
				}
				b := mustRead(t, f)
				for _, loc := range re.FindAllSubmatchIndex(b, -1) {
					group := func(name, template string) string {
						if i := re.SubexpIndex(name); i >= 0 && loc[2*i] >= 0 {
							return string(b[loc[2*i]:loc[2*i+1]])
						}
						return template
					}
					pins[f] = append(pins[f], renovatePin{datasource: group("datasource", m.DatasourceTemplate),
						depName: group("depName", m.DepNameTemplate), version: string(b[loc[2*cv]:loc[2*cv+1]]),
						start: loc[2*cv], end: loc[2*cv+1]})
				}
			}
		}
	}
	return pins
}

// TestRenovateReadsEveryPin: in every file a regex manager reads (the tool pins of scripts/install-deps.sh,
// go.work, the operator release e2e installs among them), every version on a line that is not a comment is one a
// regex reads, with a datasource Renovate has and a dependency name. A pin added without its `# renovate:` line
// fails here.
func TestRenovateReadsEveryPin(t *testing.T) {
	cfg := readRenovate(t)
	pins := regexPins(t, cfg)
	for _, want := range []string{"scripts/install-deps.sh", "go.work", "e2e/deploy_test.go"} {
		if len(pins[want]) == 0 {
			t.Errorf("no regex manager reads a pin in %s", want)
		}
	}
	datasources := []string{"go", "golang-version", "docker", "github-releases", "github-tags"}
	version := regexp.MustCompile(`\bv?\d+\.\d+\.\d+\b`)
	for f, ps := range pins {
		for _, p := range ps {
			if !slices.Contains(datasources, p.datasource) || p.depName == "" {
				t.Errorf("%s: pin %s of %q from datasource %q: want a dependency and one of %v", f, p.version, p.depName, p.datasource, datasources)
			}
		}
		b := mustRead(t, f)
		offset := 0
		for n, line := range strings.SplitAfter(string(b), "\n") {
			code := strings.TrimSpace(line)
			if !strings.HasPrefix(code, "#") && !strings.HasPrefix(code, "//") {
				for _, loc := range version.FindAllStringIndex(line, -1) {
					start, end := offset+loc[0], offset+loc[1]
					if !slices.ContainsFunc(ps, func(p renovatePin) bool { return p.start == start && p.end == end }) {
						t.Errorf("%s:%d: %s is a pin no Renovate regex reads: put a `# renovate: datasource=... depName=...` line above it",
							f, n+1, line[loc[0]:loc[1]])
					}
				}
			}
			offset += len(line)
		}
	}
	// Each `# renovate:` line of scripts/install-deps.sh names the module the script builds at that version: a tool
	// line holds "<module> <version>", and a VERSION variable's module is named where the script uses it.
	script := string(mustRead(t, "scripts/install-deps.sh"))
	for _, p := range pins["scripts/install-deps.sh"] {
		line := script[strings.LastIndex(script[:p.start], "\n")+1:]
		line = line[:strings.Index(line, "\n")]
		named := strings.Contains(line, p.depName+" "+p.version)
		if strings.Contains(line, "_VERSION="+p.version) {
			named = strings.Contains(strings.ReplaceAll(script, "# renovate: datasource=go depName="+p.depName, ""), p.depName+"/")
		}
		if !named {
			t.Errorf("scripts/install-deps.sh: %q: the pin %s is read as %s, which the line does not build", line, p.version, p.depName)
		}
	}
}

func mustRead(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRenovateManagersCoverThePins: Renovate's own managers see every go.mod (the workspace's four and
// e2e/tools'), both workflows, both Dockerfiles, the chart's values and every image pinned by tag in the kustomize
// base: no manager is switched off, no path ignored, and the kubernetes manager is pointed at the base.
func TestRenovateManagersCoverThePins(t *testing.T) {
	cfg := readRenovate(t)
	if len(cfg.EnabledManagers) != 0 {
		t.Errorf("enabledManagers %v: every manager stays on (the tests below assume Renovate's defaults)", cfg.EnabledManagers)
	}
	if cfg.IgnorePaths == nil || len(cfg.IgnorePaths) != 0 {
		t.Errorf("ignorePaths %v: want [] (Renovate's default ignores **/examples/** and **/test/**)", cfg.IgnorePaths)
	}
	for _, r := range cfg.PackageRules {
		narrowed := len(r.MatchFileNames) + len(r.MatchDepNames) + len(r.MatchDepTypes)
		if r.Enabled != nil && !*r.Enabled && narrowed == 0 {
			t.Errorf("a package rule switches off every dependency of managers %v", r.MatchManagers)
		}
	}
	files := trackedFiles(t)
	defaults := map[string][]*regexp.Regexp{}
	for m, ps := range renovateDefaultPatterns {
		for _, p := range ps {
			defaults[m] = append(defaults[m], regexp.MustCompile(p))
		}
	}
	kube := filePatterns(t, cfg.Kubernetes.ManagerFilePatterns)
	taggedImage := regexp.MustCompile(`(?m)^\s*(?:-\s+)?image:\s*["']?[\w./-]+:[\w.-]+`)
	counts := map[string]int{}
	for _, f := range files {
		base := filepath.Base(f)
		switch {
		case base == "go.mod":
			counts["go.mod"]++
			if !matchesAny(defaults["gomod"], f) {
				t.Errorf("%s: no gomod manager pattern matches it", f)
			}
		case strings.HasPrefix(f, ".github/workflows/"):
			counts["workflow"]++
			if !matchesAny(defaults["github-actions"], f) {
				t.Errorf("%s: no github-actions pattern matches it", f)
			}
		case strings.HasPrefix(base, "Dockerfile"):
			counts["Dockerfile"]++
			if !matchesAny(defaults["dockerfile"], f) {
				t.Errorf("%s: no dockerfile pattern matches it", f)
			}
		case strings.HasPrefix(f, "deploy/helm/") && base == "values.yaml":
			counts["values"]++
			if !matchesAny(defaults["helm-values"], f) {
				t.Errorf("%s: no helm-values pattern matches it", f)
			}
		case strings.HasPrefix(f, "deploy/") && !strings.HasPrefix(f, "deploy/helm/") && strings.HasSuffix(f, ".yaml"):
			if taggedImage.Match(mustRead(t, f)) {
				counts["image"]++
				if !matchesAny(kube, f) {
					t.Errorf("%s pins an image by tag, and the kubernetes manager's patterns %v miss it", f, cfg.Kubernetes.ManagerFilePatterns)
				}
			}
		}
	}
	for what, least := range map[string]int{"go.mod": 8, "workflow": 2, "Dockerfile": 2, "values": 1, "image": 1} {
		if counts[what] < least {
			t.Errorf("found %d %s files, want at least %d: the walk no longer sees the repository", counts[what], what, least)
		}
	}
}

// TestRenovateUpdatesTheE2EBinaries: each e2e/tools module pins a binary (Kubernetes, etcd, kube-rbac-proxy),
// through a tool directive or a plain requirement. Where go.mod marks the binary's module // indirect, a package
// rule enables its updates for that file: Renovate disables indirect requirements, and keeps a tool directive's
// only in releases that read tool directives. A module whose updates are switched off on purpose (the oldest
// admitted Kubernetes) is the exception.
func TestRenovateUpdatesTheE2EBinaries(t *testing.T) {
	cfg := readRenovate(t)
	mods, err := filepath.Glob(filepath.Join(repoRoot(t), "e2e", "tools", "*", "go.mod"))
	if err != nil || len(mods) < 3 {
		t.Fatalf("e2e/tools modules: %v %v", mods, err)
	}
	require := regexp.MustCompile(`(?m)^\s*(?:require\s+)?(\S+) v\S+( // indirect)?$`)
	tools := regexp.MustCompile(`(?m)^tool ([^\s(]\S*)$|^tool \(\n((?:\s+\S+\n)+)\)`)
	for _, path := range mods {
		rel, err := filepath.Rel(repoRoot(t), path)
		if err != nil {
			t.Fatal(err)
		}
		rules := func(ok func(enabled bool, depTypes, packages []string) bool) bool {
			for _, r := range cfg.PackageRules {
				if r.Enabled != nil && slices.Contains(r.MatchFileNames, rel) && ok(*r.Enabled, r.MatchDepTypes, r.MatchPackages) {
					return true
				}
			}
			return false
		}
		if rules(func(enabled bool, depTypes, packages []string) bool {
			return !enabled && len(depTypes)+len(packages) == 0
		}) {
			continue // switched off on purpose
		}
		b := mustRead(t, rel)
		var pkgs []string
		for _, m := range tools.FindAllStringSubmatch(string(b), -1) {
			pkgs = append(pkgs, strings.Fields(m[1]+" "+m[2])...)
		}
		// The binary's module is the longest requirement its package path starts with.
		indirect := map[string]bool{}
		for _, m := range require.FindAllStringSubmatch(string(b), -1) {
			indirect[m[1]] = m[2] != ""
		}
		if len(pkgs) == 0 && !slices.Contains(slices.Collect(maps.Values(indirect)), false) {
			t.Errorf("%s: no tool directive and no direct requirement: which binary does it pin?", rel)
		}
		for _, pkg := range pkgs {
			mod := ""
			for m := range indirect {
				if (pkg == m || strings.HasPrefix(pkg, m+"/")) && len(m) > len(mod) {
					mod = m
				}
			}
			if mod == "" {
				t.Errorf("%s: tool %s is in no required module", rel, pkg)
				continue
			}
			if !indirect[mod] {
				continue
			}
			enabled := rules(func(enabled bool, depTypes, packages []string) bool {
				return enabled && slices.Contains(depTypes, "indirect") && slices.ContainsFunc(packages, func(p string) bool {
					if body, ok := strings.CutPrefix(p, "/"); ok {
						return regexp.MustCompile(strings.TrimSuffix(body, "/")).MatchString(mod)
					}
					return p == mod
				})
			})
			if !enabled {
				t.Errorf("%s pins %s through tool %s as // indirect, and no package rule enables that module's updates there", rel, mod, pkg)
			}
		}
	}
}
