package versioninfo

import (
	"runtime/debug"
	"testing"

	"github.com/prometheus/common/version"
)

func TestFill(t *testing.T) {
	keep := [2]string{version.Version, version.BuildDate}
	t.Cleanup(func() { version.Version, version.BuildDate = keep[0], keep[1] })
	cases := []struct {
		name                  string
		ldVersion, ldDate     string
		info                  debug.BuildInfo
		wantVersion, wantDate string
	}{
		{"go install @tag", "", "", debug.BuildInfo{Main: debug.Module{Version: "v0.2.0"}}, "0.2.0", ""},
		{"clone build", "", "", debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.time", Value: "2026-12-01T10:00:00Z"}}}, "", "2026-12-01T10:00:00Z"},
		{"ldflags win", "0.3.0", "20261201-10:00:00", debug.BuildInfo{Main: debug.Module{Version: "v0.2.0"},
			Settings: []debug.BuildSetting{{Key: "vcs.time", Value: "2026-12-01T10:00:00Z"}}}, "0.3.0", "20261201-10:00:00"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			version.Version, version.BuildDate = tc.ldVersion, tc.ldDate
			fill(&tc.info)
			if version.Version != tc.wantVersion || version.BuildDate != tc.wantDate {
				t.Errorf("version %q date %q, want %q %q", version.Version, version.BuildDate, tc.wantVersion, tc.wantDate)
			}
		})
	}
}
