package main

import (
	"bytes"
	"embed"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/goreleaser/chglog"
	"github.com/goreleaser/nfpm/v2"
	_ "github.com/goreleaser/nfpm/v2/deb" // registers the deb packager
	"github.com/goreleaser/nfpm/v2/files"
	_ "github.com/goreleaser/nfpm/v2/rpm" // registers the rpm packager
	"go.yaml.in/yaml/v3"
)

//go:embed scripts
var scripts embed.FS

// release is the packages' release number: this program's packaging of a version. Raise it
// when the packaging changes and the version does not.
const release = "1"

// versionRE is what a -version may be: valid for dpkg and rpm, and safe in a file name.
var versionRE = regexp.MustCompile(`^[0-9][0-9A-Za-z.+~]*$`)

// options are the command line: where the binaries are, which version they are, the
// repository the unit, documents and changelog come from.
type options struct {
	dist, repo, describe, version, archs, formats, maintainer string
}

func main() {
	var o options
	flag.StringVar(&o.dist, "dist", "dist", "directory holding agentd-DESCRIBE-linux-ARCH; the packages are written there")
	flag.StringVar(&o.repo, "repo", ".", "the agentd repository (deploy/, git history)")
	flag.StringVar(&o.describe, "describe", "", "the binaries' version as make stamped it (git describe --always --dirty)")
	flag.StringVar(&o.version, "version", "", "package version (default: mapped from -describe)")
	flag.StringVar(&o.archs, "arch", "amd64,arm64", "architectures, separated by commas or spaces")
	flag.StringVar(&o.formats, "format", "deb,rpm", "package formats, separated by commas or spaces")
	flag.StringVar(&o.maintainer, "maintainer", "", "the packages' maintainer, `Name <email>` (default: whoever builds, from git config user.name and user.email)")
	flag.Parse()
	names, err := run(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pack:", err)
		os.Exit(1)
	}
	for _, n := range names {
		fmt.Println(n)
	}
}

// run writes one .deb and one .rpm per architecture into o.dist and returns their names.
func run(o options) ([]string, error) {
	if o.describe == "" {
		return nil, fmt.Errorf("-describe: empty (the version make stamped into the binaries)")
	}
	commits, err := commitCount(o.repo)
	if err != nil {
		return nil, err
	}
	version := o.version
	if version != "" && !versionRE.MatchString(version) {
		return nil, fmt.Errorf("-version %q: want a digit, then letters, digits and . + ~ only (it names the package files)", version)
	}
	if version == "" {
		if version, err = packageVersion(o.describe, commits); err != nil {
			return nil, fmt.Errorf("-describe: %w", err)
		}
	}
	if o.maintainer, err = maintainer(o.maintainer, o.repo); err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "agentd-pack-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	mtime, err := commitTime(o.repo)
	if err != nil {
		return nil, err
	}
	staged, err := stage(o.repo, work, version, o.maintainer, mtime)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, arch := range list(o.archs) {
		bin := filepath.Join(o.dist, "agentd-"+o.describe+"-linux-"+arch)
		if _, err := os.Stat(bin); err != nil {
			return nil, fmt.Errorf("-arch %s: the binary: %w", arch, err)
		}
		for _, format := range list(o.formats) {
			name, err := write(o, format, arch, bin, version, staged, mtime)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", format, arch, err)
			}
			names = append(names, name)
		}
	}
	return names, nil
}

// staged holds the files made for every package: the unit pointing at /usr/bin/agentd,
// the default settings file, the changelog, the copyright file, the scripts.
type stagedFiles struct {
	unit, config, changelog, copyright, overrides string
	scripts                                       map[string]string // "deb/postinst" → path
}

// packagedUnit is the unit as it ships in a package: ExecStart names /usr/bin/agentd. The
// unit in deploy/ names /usr/local/bin/agentd (a hand install); exactly one ExecStart line
// must say so, or the package would run a binary that is not there.
func packagedUnit(unit []byte) ([]byte, error) {
	const from, to = "\nExecStart=/usr/local/bin/agentd ", "\nExecStart=/usr/bin/agentd "
	if n := bytes.Count(unit, []byte(from)); n != 1 {
		return nil, fmt.Errorf("deploy/agentd.service: %d lines %q; want exactly 1 to point at /usr/bin/agentd", n, strings.TrimSpace(from))
	}
	return bytes.Replace(unit, []byte(from), []byte(to), 1), nil
}

// defaultConfig is /etc/agentd/agentd.json as installed: valid settings without a backend,
// so the agent is not started until an operator names one.
const defaultConfig = `{
  "runtime": "docker",
  "data_dir": "/var/lib/agentd"
}
`

const copyright = `Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: agentd
Source: https://github.com/agentd/agentd

Files: *
Copyright: 2026 the agentd authors
License: Apache-2.0
 Licensed under the Apache License, Version 2.0 (the "License"); you may not
 use this file except in compliance with the License. You may obtain a copy of
 the License at http://www.apache.org/licenses/LICENSE-2.0
 .
 Unless required by applicable law or agreed to in writing, software distributed
 under the License is distributed on an "AS IS" BASIS, WITHOUT WARRANTIES OR
 CONDITIONS OF ANY KIND, either express or implied. See the License for the
 specific language governing permissions and limitations under the License.
 .
 On Debian systems, the complete text of the Apache License, Version 2.0 can be
 found in "/usr/share/common-licenses/Apache-2.0".
`

func stage(repo, work, version, maintainer string, mtime time.Time) (stagedFiles, error) {
	var s stagedFiles
	unit, err := os.ReadFile(filepath.Join(repo, "deploy", "agentd.service"))
	if err != nil {
		return s, err
	}
	if unit, err = packagedUnit(unit); err != nil {
		return s, err
	}
	s.unit, s.config, s.copyright = filepath.Join(work, "agentd.service"), filepath.Join(work, "agentd.json"), filepath.Join(work, "copyright")
	s.overrides = filepath.Join(work, "lintian-overrides")
	overrides, err := scripts.ReadFile("scripts/deb/lintian-overrides")
	if err != nil {
		return s, err
	}
	for path, b := range map[string][]byte{s.unit: unit, s.config: []byte(defaultConfig), s.copyright: []byte(copyright), s.overrides: overrides} {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return s, err
		}
	}
	entries, err := changelog(repo, version, maintainer, mtime)
	if err != nil {
		return s, err
	}
	y, err := yaml.Marshal(entries)
	if err != nil {
		return s, err
	}
	s.changelog = filepath.Join(work, "changelog.yml")
	if err := os.WriteFile(s.changelog, y, 0o644); err != nil {
		return s, err
	}
	s.scripts = map[string]string{}
	for _, name := range []string{"deb/postinst", "deb/prerm", "deb/postrm", "rpm/post", "rpm/preun", "rpm/postun"} {
		b, err := scripts.ReadFile("scripts/" + name)
		if err != nil {
			return s, err
		}
		path := filepath.Join(work, strings.ReplaceAll(name, "/", "-"))
		if err := os.WriteFile(path, b, 0o755); err != nil {
			return s, err
		}
		s.scripts[name] = path
	}
	return s, nil
}

// write builds one package. Modes are given, never taken from the build tree's umask.
func write(o options, format, arch, bin, version string, s stagedFiles, mtime time.Time) (string, error) {
	unitDir := "/usr/lib/systemd/system"
	if format == "deb" {
		unitDir = "/lib/systemd/system" // where Debian 12's systemd and lintian expect it
	}
	mode := func(m os.FileMode) *files.ContentFileInfo {
		return &files.ContentFileInfo{Owner: "root", Group: "root", Mode: m, MTime: mtime}
	}
	docs := "/usr/share/doc/agentd/"
	contents := files.Contents{
		{Source: bin, Destination: "/usr/bin/agentd", FileInfo: mode(0o755)},
		{Source: s.unit, Destination: unitDir + "/agentd.service", FileInfo: mode(0o644)},
		{Destination: "/etc/agentd", Type: files.TypeDir, FileInfo: mode(0o755)},
		{Source: s.config, Destination: "/etc/agentd/agentd.json", Type: files.TypeConfigNoReplace, FileInfo: mode(0o644)},
		{Destination: "/var/lib/agentd", Type: files.TypeDir, FileInfo: mode(0o700)},
		// The bind-roots drop-in is documentation: it gives up the unit's mount namespace, a
		// choice for the operator who sets --allow-bind-root, never the package's.
		{Source: filepath.Join(o.repo, "deploy", "agentd-bind-roots.conf"), Destination: docs + "agentd-bind-roots.conf", FileInfo: mode(0o644)},
		{Source: filepath.Join(o.repo, "deploy", "prometheus-rules.yml"), Destination: docs + "prometheus-rules.yml", FileInfo: mode(0o644)},
		{Source: filepath.Join(o.repo, "deploy", "grafana-dashboard.json"), Destination: docs + "grafana-dashboard.json", FileInfo: mode(0o644)},
	}
	info := &nfpm.Info{
		Name:          "agentd",
		Arch:          arch,
		Platform:      "linux",
		Version:       version,
		VersionSchema: "none",
		Release:       release,
		Section:       "admin",
		Priority:      "optional",
		Maintainer:    o.maintainer,
		Vendor:        "agentd",
		Homepage:      "https://github.com/agentd/agentd",
		License:       "Apache-2.0", // LICENSE at the repository's root
		Description: "host agent that runs a control plane's container tasks on Docker\n" +
			"agentd runs the tasks its control plane assigns on the Docker Engine and\n" +
			"reports every state change; a stopped task is cleaned up only after the\n" +
			"control plane acknowledged it, across throttling, crashes and restarts.",
		Changelog: s.changelog,
		MTime:     mtime,
		Overridables: nfpm.Overridables{
			Contents: contents,
			Umask:    0o022,
		},
	}
	switch format {
	case "deb":
		info.Contents = append(info.Contents,
			&files.Content{Source: s.copyright, Destination: docs + "copyright", FileInfo: mode(0o644)},
			&files.Content{Source: s.overrides, Destination: "/usr/share/lintian/overrides/agentd", FileInfo: mode(0o644)})
		info.Scripts = nfpm.Scripts{PostInstall: s.scripts["deb/postinst"], PreRemove: s.scripts["deb/prerm"], PostRemove: s.scripts["deb/postrm"]}
		// The scripts enable and start the unit through deb-systemd-helper and -invoke.
		info.Depends = []string{"init-system-helpers (>= 1.52)"}
	case "rpm":
		info.Scripts = nfpm.Scripts{PostInstall: s.scripts["rpm/post"], PreRemove: s.scripts["rpm/preun"], PostRemove: s.scripts["rpm/postun"]}
		info.RPM.Summary = "host agent that runs a control plane's container tasks on Docker"
		info.RPM.Group = "System Environment/Daemons"
		info.RPM.BuildHost = "agentd-dist" // not this machine's name: the same commit packs the same bytes
	}
	p, err := nfpm.Get(format)
	if err != nil {
		return "", err
	}
	info = nfpm.WithDefaults(info)
	if err := nfpm.Validate(info); err != nil {
		return "", err
	}
	name := p.ConventionalFileName(info)
	f, err := os.Create(filepath.Join(o.dist, name))
	if err != nil {
		return "", err
	}
	if err := p.Package(info, f); err != nil {
		f.Close()
		return "", err
	}
	return name, f.Close()
}

// changelog is one entry for this version: the commits since the previous tag (all of them
// when there is none), newest first, each by its subject.
func changelog(repo, version, maintainer string, date time.Time) (chglog.ChangeLogEntries, error) {
	rng := "HEAD"
	if prev, err := git(repo, "describe", "--tags", "--abbrev=0", "HEAD^"); err == nil && prev != "" {
		rng = prev + "..HEAD"
	}
	out, err := git(repo, "log", "--no-merges", "--format=%H%x1f%s", rng)
	if err != nil {
		return nil, err
	}
	var changes chglog.ChangeLogChanges
	for _, line := range strings.Split(out, "\n") {
		hash, subject, ok := strings.Cut(line, "\x1f")
		if !ok {
			continue
		}
		changes = append(changes, &chglog.ChangeLogChange{Commit: hash, Note: wrap(subject, 72)})
	}
	return chglog.ChangeLogEntries{{
		ChangeLogOverridables: chglog.ChangeLogOverridables{Deb: &chglog.ChangelogDeb{Urgency: "low", Distributions: []string{"stable"}}},
		Semver:                version + "-" + release, Date: date, Packager: maintainer, Changes: changes,
	}}, nil
}

// wrap breaks a commit subject into lines of at most width characters at spaces (a word
// longer than width stays whole): the changelog formats read lines, not paragraphs.
func wrap(s string, width int) string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		if line != "" && len(line)+1+len(w) > width {
			lines, line = append(lines, line), w
			continue
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	return strings.Join(append(lines, line), "\n")
}

func list(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' })
}

func commitCount(repo string) (int, error) {
	out, err := git(repo, "rev-list", "--count", "HEAD")
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(out)
}

// commitTime is HEAD's commit time: every file's mtime in the packages, so the same commit
// packs the same bytes.
func commitTime(repo string) (time.Time, error) {
	out, err := git(repo, "log", "-1", "--format=%cI")
	if err != nil {
		return time.Time{}, err
	}
	return time.Parse(time.RFC3339, out)
}

func git(repo string, args ...string) (string, error) {
	out, err := exec.Command("git", append([]string{"-C", repo}, args...)...).Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = strings.TrimSpace(string(ee.Stderr))
		}
		return "", fmt.Errorf("git %s: %v %s", strings.Join(args, " "), err, stderr)
	}
	return strings.TrimSpace(string(out)), nil
}
