package main

import (
	"io"
	"strings"

	"github.com/localtraffic/localtraffic-exporter/kubeview/placement"
)

// SARIF 2.1.0 (OASIS), the subset code-scanning tools read: one run, the rule catalogue, one result per finding.
// A test validates the output against the official schema.

const (
	sarifSchema  = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
	sarifVersion = "2.1.0"
	docsURI      = "https://github.com/localtraffic/localtraffic-exporter/blob/main/docs/audit.md"
)

type sarifLog struct {
	Schema  string     `json:"$schema"`
	Version string     `json:"version"`
	Runs    []sarifRun `json:"runs"`
}

type sarifRun struct {
	Tool    sarifTool     `json:"tool"`
	Results []sarifResult `json:"results"`
}

type sarifTool struct {
	Driver sarifDriver `json:"driver"`
}

type sarifDriver struct {
	Name           string      `json:"name"`
	InformationURI string      `json:"informationUri"`
	Rules          []sarifRule `json:"rules"`
}

type sarifText struct {
	Text string `json:"text"`
}

type sarifRule struct {
	ID                   string      `json:"id"`
	Name                 string      `json:"name"`
	ShortDescription     sarifText   `json:"shortDescription"`
	HelpURI              string      `json:"helpUri"`
	DefaultConfiguration sarifConfig `json:"defaultConfiguration"`
}

type sarifConfig struct {
	Level string `json:"level"`
}

type sarifResult struct {
	RuleID     string          `json:"ruleId"`
	RuleIndex  int             `json:"ruleIndex"`
	Level      string          `json:"level"`
	Message    sarifText       `json:"message"`
	Locations  []sarifLocation `json:"locations"`
	Properties map[string]any  `json:"properties,omitempty"`
}

type sarifLocation struct {
	PhysicalLocation *sarifPhysical `json:"physicalLocation,omitempty"`
	LogicalLocations []sarifLogical `json:"logicalLocations,omitempty"`
}

type sarifPhysical struct {
	ArtifactLocation sarifArtifact `json:"artifactLocation"`
}

type sarifArtifact struct {
	URI string `json:"uri"`
}

type sarifLogical struct {
	Name               string `json:"name"`
	FullyQualifiedName string `json:"fullyQualifiedName"`
	Kind               string `json:"kind"`
}

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
func defaultLevel(id string) string {
	switch id {
	case placement.BlackholeNow, placement.PinnedPlacement, placement.ReplicasBelowNodes, placement.DaemonSetMissesNodes:
		return "error"
	case placement.NodePortNoHealthCheck:
		return "note"
	}
	return "warning"
}

func writeSARIF(w io.Writer, rep placement.Report) error {
	rules := placement.Rules()
	index := map[string]int{}
	driver := sarifDriver{Name: "kubectl-localtraffic", InformationURI: docsURI}
	for i, r := range rules {
		index[r.ID] = i
		driver.Rules = append(driver.Rules, sarifRule{ID: r.ID, Name: r.Name, ShortDescription: sarifText{r.Short},
			HelpURI: docsURI + "#" + strings.ToLower(r.ID), DefaultConfiguration: sarifConfig{defaultLevel(r.ID)}})
	}
	run := sarifRun{Tool: sarifTool{Driver: driver}, Results: []sarifResult{}}
	for _, f := range rep.Findings() {
		res := sarifResult{RuleID: f.ID, RuleIndex: index[f.ID], Level: sarifLevel(f.Severity),
			Message:    sarifText{f.Message + ". " + f.Why + " Fix: " + f.Fix},
			Properties: map[string]any{"severity": f.Severity.String(), "fix": f.Fix}}
		if len(f.Nodes) > 0 {
			res.Properties["nodes"] = f.Nodes
		}
		for _, o := range f.Objects {
			loc := sarifLocation{LogicalLocations: []sarifLogical{{Name: o.Name,
				FullyQualifiedName: o.Kind + "/" + o.Namespace + "/" + o.Name, Kind: "resource"}}}
			if o.Source != "" {
				loc.PhysicalLocation = &sarifPhysical{ArtifactLocation: sarifArtifact{URI: o.Source}}
			}
			res.Locations = append(res.Locations, loc)
		}
		run.Results = append(run.Results, res)
	}
	return writeJSON(w, sarifLog{Schema: sarifSchema, Version: sarifVersion, Runs: []sarifRun{run}})
}
