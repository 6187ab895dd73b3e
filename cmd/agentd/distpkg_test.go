package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agentd/agentd/deploy"
)

// The packages `make dist` writes (tools/pack, nfpm), read back with the distributions' own
// tools: what a wrong mode, a config file not kept across upgrades, a unit pointing at a
// binary that is not there, or a drop-in enabled behind the operator's back would show.

// rpmArch names the release's machines as rpm does.
var rpmArch = map[string]string{"amd64": "x86_64", "arm64": "aarch64"}

// distPackages finds the one .deb and the one .rpm of arch in dist.
func distPackages(t *testing.T, dist, arch string) (deb, rpm string) {
	t.Helper()
	debs, _ := filepath.Glob(filepath.Join(dist, "agentd_*_"+arch+".deb"))
	rpms, _ := filepath.Glob(filepath.Join(dist, "agentd-*."+rpmArch[arch]+".rpm"))
	if len(debs) != 1 || len(rpms) != 1 {
		t.Fatalf("%s: want one .deb and one .rpm for %s; found %v and %v", dist, arch, debs, rpms)
	}
	return debs[0], rpms[0]
}

func runTool(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out, stderr)
	}
	return string(out)
}

// wantEntry is one file of a package: its mode as ls prints it.
type wantEntry struct{ path, mode string }

var packagedFiles = []wantEntry{
	{"/usr/bin/agentd", "-rwxr-xr-x"},
	{"/etc/agentd/agentd.json", "-rw-r--r--"},
	{"/var/lib/agentd", "drwx------"},
	{"/usr/share/doc/agentd/agentd-bind-roots.conf", "-rw-r--r--"},
}

// checkDeb reads a .deb back with dpkg-deb: control fields, every file's mode and owner, the
// conffile, the maintainer scripts, the unit's ExecStart and the binary's bytes.
func checkDeb(t *testing.T, deb, arch, hash, bin string) {
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		t.Skip("dpkg-deb is not installed")
	}
	if got := strings.TrimSpace(runTool(t, "dpkg-deb", "-f", deb, "Architecture")); got != arch {
		t.Errorf("%s: Architecture %q; want %q", deb, got, arch)
	}
	if v := strings.TrimSpace(runTool(t, "dpkg-deb", "-f", deb, "Version")); hash != "" && !strings.Contains(v, "g"+hash) {
		t.Errorf("%s: Version %q does not name commit %s (git describe on an untagged commit)", deb, v, hash)
	}
	listing := map[string]string{} // path → "mode owner"
	for _, line := range strings.Split(strings.TrimSpace(runTool(t, "dpkg-deb", "-c", deb)), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 {
			t.Fatalf("dpkg-deb -c line %q", line)
		}
		listing[strings.TrimSuffix(strings.TrimPrefix(f[5], "."), "/")] = f[0] + " " + f[1]
	}
	for _, w := range append(packagedFiles, wantEntry{"/lib/systemd/system/agentd.service", "-rw-r--r--"}) {
		if got := listing[w.path]; got != w.mode+" root/root" {
			t.Errorf("%s: %s is %q; want %q", deb, w.path, got, w.mode+" root/root")
		}
	}
	for path := range listing {
		if strings.HasPrefix(path, "/etc/systemd") {
			t.Errorf("%s: ships %s: the package enables nothing behind the operator's back", deb, path)
		}
	}
	ctrl := tarFiles(t, runTool(t, "dpkg-deb", "--ctrl-tarfile", deb))
	if strings.TrimSpace(ctrl["./conffiles"].body) != "/etc/agentd/agentd.json" {
		t.Errorf("%s: conffiles %q; want /etc/agentd/agentd.json (kept across upgrades)", deb, ctrl["./conffiles"].body)
	}
	for _, s := range []string{"./postinst", "./prerm", "./postrm"} {
		if ctrl[s].mode&0o777 != 0o755 || !strings.HasPrefix(ctrl[s].body, "#!/bin/sh") {
			t.Errorf("%s: maintainer script %s: mode %o, starts %.20q", deb, s, ctrl[s].mode, ctrl[s].body)
		}
	}
	checkScripts(t, deb, ctrl["./postinst"].body, ctrl["./postinst"].body)
	data := tarFiles(t, runTool(t, "dpkg-deb", "--fsys-tarfile", deb))
	checkUnit(t, deb, data["./lib/systemd/system/agentd.service"].body)
	checkSameBinary(t, deb, data["./usr/bin/agentd"].body, bin)
}

// checkRPM reads an .rpm back with rpm -qp: version, every file's mode, owner and flags
// (%config(noreplace) is "cn"), the scriptlets, the changelog.
func checkRPM(t *testing.T, rpm, arch, hash, bin string) {
	if _, err := exec.LookPath("rpm"); err != nil {
		t.Skip("rpm is not installed")
	}
	if got := runTool(t, "rpm", "-qp", "--qf", "%{ARCH} %{VERSION}", rpm); !strings.HasPrefix(got, rpmArch[arch]+" ") || (hash != "" && !strings.Contains(got, "g"+hash)) {
		t.Errorf("%s: arch and version %q; want %s and commit %s", rpm, got, rpmArch[arch], hash)
	}
	files := map[string][]string{} // path → mode, owner, group, flags
	for _, line := range strings.Split(strings.TrimSpace(runTool(t, "rpm", "-qp", "--qf", "[%{FILENAMES}\t%{FILEMODES:perms}\t%{FILEUSERNAME}\t%{FILEGROUPNAME}\t%{FILEFLAGS:fflags}\n]", rpm)), "\n") {
		f := strings.Split(line, "\t")
		files[f[0]] = f[1:]
	}
	for _, w := range append(packagedFiles, wantEntry{"/usr/lib/systemd/system/agentd.service", "-rw-r--r--"}) {
		if got := files[w.path]; len(got) < 3 || got[0] != w.mode || got[1] != "root" || got[2] != "root" {
			t.Errorf("%s: %s is %q; want %s root root", rpm, w.path, got, w.mode)
		}
	}
	if got := files["/etc/agentd/agentd.json"]; len(got) < 4 || got[3] != "cn" {
		t.Errorf("%s: /etc/agentd/agentd.json flags %q; want cn (%%config(noreplace): kept across upgrades)", rpm, got)
	}
	scripts := runTool(t, "rpm", "-qp", "--scripts", rpm)
	for _, want := range []string{"postinstall scriptlet", "preuninstall scriptlet", "postuninstall scriptlet"} {
		if !strings.Contains(scripts, want) {
			t.Errorf("%s: no %s", rpm, want)
		}
	}
	checkScripts(t, rpm, scripts[strings.Index(scripts, "postinstall scriptlet"):strings.Index(scripts, "preuninstall scriptlet")], scripts)
	if cl := runTool(t, "rpm", "-qp", "--changelog", rpm); hash != "" && !strings.Contains(cl, "agentd") {
		t.Errorf("%s: changelog %.200q", rpm, cl)
	}
	// The bytes of the unit and the binary, by the SHA-256 digests rpm keeps for each file.
	digests := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(runTool(t, "rpm", "-qp", "--dump", rpm)), "\n") {
		if f := strings.Fields(line); len(f) > 3 {
			digests[f[0]] = f[3]
		}
	}
	unit := strings.Replace(string(deploy.Unit), "\nExecStart=/usr/local/bin/agentd ", "\nExecStart=/usr/bin/agentd ", 1)
	checkUnit(t, "the unit for "+rpm, unit)
	if h := sha256.Sum256([]byte(unit)); digests["/usr/lib/systemd/system/agentd.service"] != hex.EncodeToString(h[:]) {
		t.Errorf("%s: the unit is not deploy/agentd.service with ExecStart=/usr/bin/agentd", rpm)
	}
	want, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if h := sha256.Sum256(want); digests["/usr/bin/agentd"] != hex.EncodeToString(h[:]) {
		t.Errorf("%s: /usr/bin/agentd is not %s", rpm, bin)
	}
}

// systemctlStarts is a script line that starts or enables a unit by systemctl itself.
var systemctlStarts = regexp.MustCompile(`(?m)^[ \t]*systemctl[ \t]+([^ \t\n]+[ \t]+)*(start|enable|restart)([ \t]|$)`)

// checkScripts: the install script starts the agent only behind agentd's own settings check,
// and every script reloads systemd.
func checkScripts(t *testing.T, pkg, postinst, all string) {
	if !strings.Contains(postinst, "agentd run --print-config") {
		t.Errorf("%s: the install script does not ask agentd whether it is configured:\n%s", pkg, postinst)
	}
	if !strings.Contains(all, "systemctl daemon-reload") {
		t.Errorf("%s: no script reloads systemd", pkg)
	}
	// Debian's policy-rc.d is asked only by deb-systemd-invoke: a .deb never starts by systemctl.
	if strings.HasSuffix(pkg, ".deb") && (systemctlStarts.MatchString(postinst) || !strings.Contains(postinst, "deb-systemd-invoke start")) {
		t.Errorf("%s: the install script starts or enables the unit past policy-rc.d (want deb-systemd-helper and deb-systemd-invoke):\n%s", pkg, postinst)
	}
}

func checkUnit(t *testing.T, pkg, unit string) {
	if !strings.Contains(unit, "\nExecStart=/usr/bin/agentd run\n") || strings.Contains(unit, "ExecStart=/usr/local/bin") {
		t.Errorf("%s: the unit does not run /usr/bin/agentd (the packaged binary):\n%s", pkg, unit)
	}
}

func checkSameBinary(t *testing.T, pkg, packaged, bin string) {
	want, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256([]byte(packaged)) != sha256.Sum256(want) {
		t.Errorf("%s: /usr/bin/agentd is not %s (%d bytes; want %d)", pkg, bin, len(packaged), len(want))
	}
}

type tarFile struct {
	mode int64
	body string
}

func tarFiles(t *testing.T, archive string) map[string]tarFile {
	t.Helper()
	files := map[string]tarFile{}
	tr := tar.NewReader(strings.NewReader(archive))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatalf("tar: %v", err)
		}
		var b bytes.Buffer
		if _, err := io.Copy(&b, tr); err != nil {
			t.Fatal(err)
		}
		files[h.Name] = tarFile{h.Mode, b.String()}
	}
}

// checkLintian runs Debian's package checker: no error, the output logged for the record.
func checkLintian(t *testing.T, deb string) {
	if _, err := exec.LookPath("lintian"); err != nil {
		t.Skip("lintian is not installed (.ci/run installs it as root)")
	}
	out, err := exec.Command("lintian", "--tag-display-limit", "0", deb).CombinedOutput()
	t.Logf("lintian %s (exit %v):\n%s", filepath.Base(deb), err, out)
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "E: ") {
			t.Errorf("lintian error: %s", line)
		}
	}
}
