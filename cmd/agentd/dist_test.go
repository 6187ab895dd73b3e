package main

import (
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

// TestDist runs `make dist` into a temporary directory (make test-dist; two cross-builds are
// too slow for make test): both binaries are static ELF files for their machine, carry this
// commit, and the amd64 one runs and says so in `agentd version --json`; SHA256SUMS covers
// every file and matches it; the unit file ships beside them; the .deb and .rpm of each
// machine hold what distpkg_test.go reads back, lintian finds no error, and the .deb
// installs, upgrades and purges in a throwaway Debian root (distinstall_test.go).
func TestDist(t *testing.T) {
	if os.Getenv("AGENTD_DIST_TEST") == "" {
		t.Skip("make dist test: set AGENTD_DIST_TEST=1 (make test-dist)")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	git := func(args ...string) string {
		out, err := exec.Command("git", append([]string{"-C", root}, args...)...).Output()
		if err != nil {
			t.Fatalf("git %v: %v", args, err)
		}
		return strings.TrimSpace(string(out))
	}
	head, describe := git("rev-parse", "HEAD"), git("describe", "--always", "--dirty")
	dist := t.TempDir()
	if out, err := exec.Command("make", "-C", root, "dist", "DIST="+dist).CombinedOutput(); err != nil {
		t.Fatalf("make dist: %v\n%s", err, out)
	}
	machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	for arch, machine := range machines {
		staticBinaryOfThisCommit(t, filepath.Join(dist, "agentd-"+describe+"-linux-"+arch), machine, head, describe)
	}
	versionNamesThisCommit(t, filepath.Join(dist, "agentd-"+describe+"-linux-amd64"), head, describe)
	listed := everyFileSummed(t, dist)
	hash := "" // what the package version names: the commit, unless HEAD is a tag
	if exec.Command("git", "-C", root, "describe", "--tags", "--exact-match").Run() != nil {
		hash = git("rev-parse", "--short", "HEAD")
	}
	for arch := range machines {
		deb, rpm := distPackages(t, dist, arch)
		bin := filepath.Join(dist, "agentd-"+describe+"-linux-"+arch)
		for _, p := range []string{deb, rpm} {
			if !listed[filepath.Base(p)] {
				t.Errorf("%s is not in SHA256SUMS", filepath.Base(p))
			}
			if fi, err := os.Stat(p); err == nil {
				t.Logf("%s: %d bytes", filepath.Base(p), fi.Size())
			}
		}
		t.Run("deb/"+arch, func(t *testing.T) { checkDeb(t, deb, arch, hash, bin) })
		t.Run("rpm/"+arch, func(t *testing.T) { checkRPM(t, rpm, arch, hash, bin) })
	}
	deb, _ := distPackages(t, dist, "amd64")
	t.Run("lintian", func(t *testing.T) { checkLintian(t, deb) })
	t.Run("install-upgrade-purge", func(t *testing.T) { checkInstallUpgradePurge(t, root, dist, describe) })
}

// staticBinaryOfThisCommit: the release binary is a static Go binary for its machine that
// carries the commit and the version it was built from.
func staticBinaryOfThisCommit(t *testing.T, bin string, machine elf.Machine, head, describe string) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatalf("%s: %v", bin, err)
	}
	if f.Machine != machine {
		t.Errorf("%s: ELF machine %v; want %v", bin, f.Machine, machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s: has a dynamic loader (PT_INTERP); want a static binary", bin)
		}
	}
	f.Close()
	// -trimpath keeps -ldflags out of the build info; the stamped strings are in the data.
	if _, err := buildinfo.ReadFile(bin); err != nil {
		t.Fatalf("%s: not a Go binary: %v", bin, err)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(head)) || !bytes.Contains(b, []byte(describe)) {
		t.Errorf("%s does not carry this commit %s and version %s", bin, head, describe)
	}
}

// versionNamesThisCommit: `agentd version --json` of the release names the commit, the
// version, a date and the platform.
func versionNamesThisCommit(t *testing.T, bin, head, describe string) {
	t.Helper()
	out, err := exec.Command(bin, "version", "--json").Output()
	if err != nil {
		t.Fatalf("agentd version --json: %v", err)
	}
	var v versionInfo
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("version --json: %v\n%s", err, out)
	}
	if v.Commit != head || v.Version != describe || v.Date == "" || v.Platform != "linux/amd64" {
		t.Errorf("version --json: %+v; want commit %s, version %s, a date", v, head, describe)
	}
}

// everyFileSummed: SHA256SUMS lists every file of the release (the unit and its drop-in for
// bind roots among them) with its right sum. It returns the names listed.
func everyFileSummed(t *testing.T, dist string) map[string]bool {
	t.Helper()
	sums, err := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(sums)), "\n") {
		sum, name, ok := strings.Cut(line, "  ")
		if !ok {
			t.Fatalf("SHA256SUMS line %q", line)
		}
		b, err := os.ReadFile(filepath.Join(dist, name))
		if err != nil {
			t.Fatal(err)
		}
		if h := sha256.Sum256(b); hex.EncodeToString(h[:]) != sum {
			t.Errorf("SHA256SUMS: %s does not match", name)
		}
		listed[name] = true
	}
	entries, _ := os.ReadDir(dist)
	for _, e := range entries {
		if e.Name() != "SHA256SUMS" && !listed[e.Name()] {
			t.Errorf("%s is not in SHA256SUMS", e.Name())
		}
	}
	if !listed["agentd.service"] {
		t.Error("the unit file is not in the release")
	}
	if !listed["agentd-bind-roots.conf"] {
		t.Error("the unit's drop-in for bind roots is not in the release")
	}
	return listed
}

// TestVersionFallsBackToBuildInfo: without ldflags the version says what the toolchain knows
// (never an empty platform or Go version); with them, exactly those values.
func TestVersionFallsBackToBuildInfo(t *testing.T) {
	v := buildVersion()
	if v.Version == "" || v.Go == "" || v.Platform == "" {
		t.Fatalf("buildVersion without ldflags: %+v", v)
	}
	oldV, oldC, oldD := version, commit, date
	t.Cleanup(func() { version, commit, date = oldV, oldC, oldD })
	// A `go install …@v1.2.3` build: no ldflags, the module version and the VCS stamp.
	version, commit, date = "dev", "", ""
	v = versionFrom(&debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.time", Value: "2026-11-29T10:00:00Z"}, {Key: "vcs.modified", Value: "true"}}})
	if v.Version != "v1.2.3" || v.Commit != "0123abcd" || v.Date != "2026-11-29T10:00:00Z" || !v.Modified {
		t.Fatalf("versionFrom build info: %+v", v)
	}
	if v = versionFrom(&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}); v.Version != "dev" {
		t.Fatalf("a (devel) build: %+v; want dev", v)
	}
	version, commit, date = "v9.9.9", "abc123", "2026-11-30T00:00:00Z"
	v = buildVersion()
	if v.Version != "v9.9.9" || v.Commit != "abc123" || v.Date != "2026-11-30T00:00:00Z" {
		t.Fatalf("buildVersion with ldflags: %+v", v)
	}
	if s := v.String(); !strings.Contains(s, "v9.9.9") || !strings.Contains(s, "abc123") {
		t.Fatalf("version line %q", s)
	}
}
