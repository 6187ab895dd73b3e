package main

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
)

// version, commit and date are set at build time by `make build` / `make dist`:
// -ldflags "-X main.version=… -X main.commit=… -X main.date=…". A build without them (go
// install, go build) falls back to what the Go toolchain recorded: the module version and
// the VCS revision and time (see buildVersion).
var (
	version = "dev"
	commit  = ""
	date    = ""
)

// versionInfo is what `agentd version` prints.
type versionInfo struct {
	Version  string `json:"version"`
	Commit   string `json:"commit"`
	Date     string `json:"date"`
	Modified bool   `json:"modified,omitempty"` // built from a tree with uncommitted changes
	Go       string `json:"go"`
	Platform string `json:"platform"`
}

// buildVersion is the version of this binary: the ldflags values where set, else the build
// information the toolchain embedded.
func buildVersion() versionInfo {
	bi, _ := debug.ReadBuildInfo()
	return versionFrom(bi)
}

// versionFrom fills what the ldflags left unset from the toolchain's build information.
func versionFrom(bi *debug.BuildInfo) versionInfo {
	v := versionInfo{Version: version, Commit: commit, Date: date, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi == nil {
		return v
	}
	if v.Version == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v.Version = bi.Main.Version // go install github.com/agentd/agentd/cmd/agentd@v1.2.3
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			if v.Commit == "" {
				v.Commit = s.Value
			}
		case "vcs.time":
			if v.Date == "" {
				v.Date = s.Value
			}
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

func (v versionInfo) String() string {
	s := "agentd " + v.Version
	if v.Commit != "" {
		s += " (commit " + v.Commit
		if v.Modified {
			s += ", modified"
		}
		s += ")"
	}
	if v.Date != "" {
		s += " built " + v.Date
	}
	return s + " " + v.Go + " " + v.Platform
}

type versionCmd struct {
	JSON bool `name:"json" help:"Print JSON: version, commit, date, go, platform."`
}

func (c *versionCmd) Run() error {
	v := buildVersion()
	if c.JSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	_, err := fmt.Println(v)
	return err
}
