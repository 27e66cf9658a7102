package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
	"github.com/localtraffic/localtraffic-exporter/e2e/drill"
)

// chromium runs Debian's headless Chromium on url (a loopback address) with its network confined to loopback:
// a proxy that does not exist for anything else, no background services. It returns the rendered DOM, and
// writes a screenshot to png when png is not "".
func chromium(t *testing.T, ctx context.Context, url, png string) string {
	t.Helper()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		fatalf(t, "chromium not installed (scripts/install-deps.sh packages installs it): %v", err)
	}
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-default-apps", "--disable-extensions", "--proxy-server=http://127.0.0.1:9",
		"--user-data-dir=" + t.TempDir(), "--window-size=1600,700"}
	run := func(args ...string) string {
		ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, append(append([]string{}, base...), args...)...)
		cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
		out, err := cmd.Output()
		if err != nil {
			fatalf(t, "chromium %v: %v", args, err)
		}
		return string(out)
	}
	dom := run("--dump-dom", url)
	if png != "" {
		run("--screenshot="+png, url)
	}
	return dom
}

// servicesTable reads the landing page's table#services from a DOM: Service → its cells.
func servicesTable(dom string) (map[string][]string, error) {
	doc, err := html.Parse(strings.NewReader(dom))
	if err != nil {
		return nil, err
	}
	rows := map[string][]string{}
	var inTable bool
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && n.Data == "table" {
			inTable = false
			for _, a := range n.Attr {
				inTable = inTable || (a.Key == "id" && a.Val == "services")
			}
		}
		if inTable && n.Type == html.ElementNode && n.Data == "tr" {
			var cells []string
			for c := n.FirstChild; c != nil; c = c.NextSibling {
				if c.Type == html.ElementNode && c.Data == "td" {
					cells = append(cells, strings.TrimSpace(nodeText(c)))
				}
			}
			if len(cells) > 1 {
				rows[cells[0]] = cells
			}
			return
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	if len(rows) == 0 {
		return nil, fmt.Errorf("no rows in table#services")
	}
	return rows, nil
}

func nodeText(n *html.Node) string {
	if n.Type == html.TextNode {
		return n.Data
	}
	var b strings.Builder
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		b.WriteString(nodeText(c))
	}
	return b.String()
}

// TestLandingPageInBrowserDuringDrill: headless Chromium loads each node's landing page from the exporter on
// the e2e cluster during the drill and reads the rendered table: node-1 serves kubelings/checkout, every other
// node blackholes it; after the fix every node serves. Screenshots go to the test's artifact directory (kept
// with `go test -artifacts`; see -outputdir).
func TestLandingPageInBrowserDuringDrill(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	if err := drill.Apply(ctx, c); err != nil {
		fatalln(t, err)
	}
	t.Cleanup(func() {
		if err := drill.Cleanup(context.Background(), c); err != nil {
			errorf(t, "drill cleanup: %v", err)
		}
	})
	urls := map[string]string{}
	for _, n := range c.Nodes() {
		addr, err := c.Forward(n.NS, fmt.Sprintf("%s:%d", n.IP, cluster.ExporterPort))
		if err != nil {
			fatalln(t, err)
		}
		urls[n.Name] = "http://" + addr + "/"
	}
	shots := t.ArtifactDir()
	service := drill.Namespace + "/" + drill.Service

	// The page shows the last scrape; drill.Observe scrapes every exporter, as Prometheus would.
	check := func(phase string, want func(node string) string) {
		eventually(t, 2*time.Minute, phase+": every node's landing page shows its verdict", func() error {
			drill.Observe(ctx, c)
			for _, n := range c.Nodes() {
				dom := chromium(t, ctx, urls[n.Name], "")
				rows, err := servicesTable(dom)
				if err != nil {
					return fmt.Errorf("%s: %w", n.Name, err)
				}
				row, ok := rows[service]
				if !ok {
					return fmt.Errorf("%s: no row for %s in %v", n.Name, service, rows)
				}
				if row[1] != want(n.Name) {
					return fmt.Errorf("%s: verdict %q, want %q (row %q)", n.Name, row[1], want(n.Name), row)
				}
			}
			return nil
		})
		for _, n := range c.Nodes() {
			png := filepath.Join(shots, fmt.Sprintf("landing-%s-%s.png", phase, n.Name))
			dom := chromium(t, ctx, urls[n.Name], png)
			rows, err := servicesTable(dom)
			if err != nil {
				fatalln(t, err)
			}
			t.Logf("%s %s: %q (screenshot %s)", phase, n.Name, rows[service], png)
			if st, err := os.Stat(png); err != nil || st.Size() == 0 {
				errorf(t, "no screenshot %s: %v", png, err)
			}
		}
	}
	first := c.Nodes()[0].Name
	check("drill", func(node string) string {
		if node == first {
			return "serving"
		}
		return "BLACKHOLE"
	})
	if err := drill.Fix(ctx, c); err != nil {
		fatalln(t, err)
	}
	check("fix", func(string) string { return "serving" })
}
