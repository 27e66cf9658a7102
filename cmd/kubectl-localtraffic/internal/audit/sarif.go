package audit

import (
	"io"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/owenrumney/go-sarif/v3/pkg/report/v210/sarif"
	"github.com/prometheus/common/version"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/placement"
	"github.com/localtraffic/localtraffic-exporter/kubeview"
)

// SARIF 2.1.0 (OASIS), built with go-sarif, as GitHub code scanning (github/codeql-action/upload-sarif) reads it:
// one run, the rule catalogue with help links into docs/audit.md, one result per finding, located at the file and
// line of each object it involves. sarif_test.go validates the output against the official schema
// (testdata/sarif-schema-2.1.0.json).

const (
	sarifSchema = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
	repoURL     = "https://github.com/localtraffic/localtraffic-exporter"
)

// releaseVersion matches what the release pipeline puts into version.Version for a tag (goreleaser's
// {{.Version}}: the tag without its "v"); snapshots and make build's `git describe` output do not match.
var releaseVersion = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`)

// docsURL is docs/audit.md as of the binary's release tag, so a rule's help describes the rule this binary
// applies; builds that are not a release link to main.
func docsURL() string {
	ref := "main"
	if releaseVersion.MatchString(version.Version) {
		ref = "v" + version.Version
	}
	return repoURL + "/blob/" + ref + "/docs/audit.md"
}

// helpAnchor is GitHub's anchor for the rule's heading in docs/audit.md ("### LT101 pinned-placement").
func helpAnchor(r placement.Rule) string { return strings.ToLower(string(r.ID)) + "-" + r.Name }

// sarifLevel maps severities onto SARIF's levels: critical is an error, warning a warning, info a note.
func sarifLevel(s placement.Severity) string {
	switch s {
	case placement.Critical:
		return "error"
	case placement.Warning:
		return "warning"
	}
	return "note"
}

// defaultLevel is each rule's level in its usual setting (an unguarded NodePort Service), for the catalogue.
func defaultLevel(id placement.RuleID) string {
	switch id {
	case placement.BlackholeNow, placement.PinnedPlacement, placement.ReplicasBelowNodes, placement.DaemonSetMissesNodes:
		return "error"
	case placement.NodePortNoHealthCheck:
		return "note"
	}
	return "warning"
}

// artifactURI turns a manifest's path into a SARIF artifact URI: relative paths stay relative (code scanning
// resolves them against the repository's root, where CI runs the audit), absolute ones become file URIs, and a
// URL -f fetched stays as it is.
func artifactURI(path string) string {
	if u, err := url.Parse(path); err == nil && (u.Scheme == "http" || u.Scheme == "https") {
		return path
	}
	if filepath.IsAbs(path) {
		return (&url.URL{Scheme: "file", Path: filepath.ToSlash(path)}).String()
	}
	return (&url.URL{Path: filepath.ToSlash(filepath.Clean(path))}).String()
}

// writeSARIF writes the report. Objects read from standard input are attributed to stdinName (--stdin-filename),
// without a line: what is piped in is usually rendered output (kustomize build, helm template), whose line
// numbers are not the named file's.
func writeSARIF(w io.Writer, rep placement.Report, stdinName string) error {
	run := sarif.NewRunWithInformationURI("kubectl-localtraffic", repoURL)
	run.Tool.Driver.WithVersion(version.Version)
	docs := docsURL()
	for _, r := range placement.Rules() {
		help := docs + "#" + helpAnchor(r)
		run.AddRule(string(r.ID)).WithName(r.Name).
			WithShortDescription(sarif.NewMultiformatMessageString().WithText(r.Short)).
			WithFullDescription(sarif.NewMultiformatMessageString().WithText(r.Short + ".")).
			WithHelpURI(help).
			WithHelp(sarif.NewMultiformatMessageString().WithText(r.Short + ". What to do: " + help).
				WithMarkdown(r.Short + ". [What to do](" + help + ").")).
			WithDefaultConfiguration(sarif.NewReportingConfiguration().WithLevel(defaultLevel(r.ID)))
	}
	for _, f := range rep.Findings() {
		props := sarif.NewPropertyBag()
		props.Add("severity", f.Severity.String())
		props.Add("fix", f.Fix)
		if len(f.Nodes) > 0 {
			props.Add("nodes", f.Nodes)
		}
		level := sarifLevel(f.Severity)
		if f.Ignored {
			// Placed so on purpose: a note, suppressed in source (the annotation is on the Service's own
			// manifest) with the annotation's reason, so code scanning lists it as suppressed, not as an alert.
			level = "note"
			props.Add("ignored", true)
		}
		res := run.CreateResultForRule(string(f.ID)).WithLevel(level).
			WithMessage(sarif.NewTextMessage(f.Message + ". " + f.Why + " Fix: " + f.Fix)).
			WithProperties(props)
		if f.Ignored {
			res.AddSuppression(sarif.NewSuppression().WithKind("inSource").
				WithJustification(kubeview.AnnotationIntentionalPlacement + ": " + f.IgnoredReason))
		}
		for _, o := range f.Objects {
			loc := sarif.NewLocation().WithLogicalLocations([]*sarif.LogicalLocation{sarif.NewLogicalLocation().
				WithName(o.Name).WithFullyQualifiedName(o.Kind + "/" + o.Namespace + "/" + o.Name).WithKind("resource")}).
				WithMessage(sarif.NewTextMessage(o.Kind + " " + o.Namespace + "/" + o.Name))
			switch {
			case o.Source == "":
				// Live mode: the object is in the cluster, not in a file.
			case o.Source == stdinFile:
				loc.WithPhysicalLocation(sarif.NewPhysicalLocation().
					WithArtifactLocation(sarif.NewSimpleArtifactLocation(artifactURI(stdinName))))
			default:
				phys := sarif.NewPhysicalLocation().WithArtifactLocation(sarif.NewSimpleArtifactLocation(artifactURI(o.Source)))
				if o.Line > 0 {
					phys.WithRegion(sarif.NewRegion().WithStartLine(o.Line))
				}
				loc.WithPhysicalLocation(phys)
			}
			res.AddLocation(loc)
		}
	}
	rep2 := sarif.NewReport()
	rep2.Schema = sarifSchema
	rep2.AddRun(run)
	if err := rep2.PrettyWrite(w); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}
