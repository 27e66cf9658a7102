// Package versioninfo completes github.com/prometheus/common/version for builds without the release
// pipeline's -ldflags: `go install github.com/localtraffic/localtraffic-exporter/cmd/...@v0.2.0` records the
// module version (and a clone's `go build` the VCS time) in the binary, so --version and localtraffic_build_info
// still say what was built instead of an empty version.
package versioninfo

import (
	"runtime/debug"
	"strings"

	"github.com/prometheus/common/version"
)

// Fill sets version.Version and version.BuildDate from the binary's build information where -ldflags left them
// empty. Call it first thing in main.
func Fill() {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return
	}
	fill(info)
}

func fill(info *debug.BuildInfo) {
	if version.Version == "" {
		// "(devel)" is what a build inside the module's own tree records: no version to report.
		if v := info.Main.Version; v != "" && v != "(devel)" {
			version.Version = strings.TrimPrefix(v, "v")
		}
	}
	for _, s := range info.Settings {
		if s.Key == "vcs.time" && version.BuildDate == "" {
			version.BuildDate = s.Value
		}
	}
}
