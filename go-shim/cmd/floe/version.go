package main

import (
	"fmt"
	"runtime/debug"
)

// Set by the Makefile's link flags: floe's version (Cargo.toml's), the commit built and
// its date.
var (
	floeVersion = "dev"
	floeCommit  = ""
	floeDate    = ""
)

// versionText is what `floe --version` prints after "Version:": floe's version, the
// commit it was built from (Go's record of the checkout when the link flags set none),
// and the Benthos it runs on.
func versionText() string {
	commit, benthos := floeCommit, "unknown"
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == "github.com/redpanda-data/benthos/v4" {
				benthos = dep.Version
			}
		}
		if commit == "" {
			commit = vcsCommit(info.Settings)
		}
	}
	if commit == "" {
		commit = "unknown"
	}
	return fmt.Sprintf("floe %s (commit %s, Benthos %s)", floeVersion, commit, benthos)
}

// vcsCommit is the commit Go recorded, marked when the checkout had local changes.
func vcsCommit(settings []debug.BuildSetting) string {
	var rev, dirty string
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+changes"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev == "" {
		return ""
	}
	return rev + dirty
}

// buildDate is when the commit was made, as the link flags or Go recorded it.
func buildDate() string {
	if floeDate != "" {
		return floeDate
	}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.time" {
				return s.Value
			}
		}
	}
	return "unknown"
}
