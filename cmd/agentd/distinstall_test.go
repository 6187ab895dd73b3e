package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// debianSuite is the release the throwaway root is built from (debootstrap --variant=minbase).
const debianSuite = "bookworm"

// fakeSystemctl stands in for systemctl in the throwaway root, as systemd would answer:
// `is-active` from a flag file the test sets, `is-enabled` from the unit's links, `preset`
// enabling as Debian's default preset does (deb-systemd-helper enable asks for it), and
// `try-restart` restarting only what is active. Every action it takes is recorded as
// "verb unit", so the maintainer scripts' decisions (reload, start, restart, stop) are what the
// test reads back, whether they called systemctl or deb-systemd-invoke did.
const fakeSystemctl = `#!/bin/sh
verb=""; unit=""
for a in "$@"; do
	case "$a" in -*) ;; *) if [ -z "$verb" ]; then verb=$a; elif [ -z "$unit" ]; then unit=$a; fi ;; esac
done
case "$verb" in
is-active) [ -e /run/agentd.active ]; exit $? ;;
is-enabled) if ls /etc/systemd/system/*.wants/"$unit" >/dev/null 2>&1; then echo enabled; else echo disabled; exit 1; fi; exit 0 ;;
try-restart) [ -e /run/agentd.active ] || exit 0; verb=restart ;;
preset) mkdir -p /etc/systemd/system/multi-user.target.wants && ln -sf "/lib/systemd/system/$unit" /etc/systemd/system/multi-user.target.wants/ ;;
esac
echo "$verb $unit" >> /var/log/systemctl.calls
exit 0
`

// denyStarts is a policy-rc.d as chroots and image builds install it: no service may start.
const denyStarts = "#!/bin/sh\nexit 101\n"

// enabled reports whether deb-systemd-helper enabled the unit in the root.
func (c chrootRoot) enabled() bool {
	links, _ := filepath.Glob(filepath.Join(c.root, "etc/systemd/system/*.wants/agentd.service"))
	return len(links) > 0
}

// debianRoot is a throwaway copy of a minimal Debian root, built once with debootstrap from
// the mirror apt is configured with and cached in bin/ (make clean removes it). It skips,
// saying why, where one cannot be built.
func debianRoot(t *testing.T, repo string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("install test: needs root (dpkg runs the maintainer scripts in a chroot)")
	}
	cache := filepath.Join(repo, "bin", "debian-root-"+debianSuite)
	if _, err := os.Stat(filepath.Join(cache, "usr", "bin", "dpkg")); err != nil {
		if _, err := exec.LookPath("debootstrap"); err != nil {
			t.Skip("install test: debootstrap is not installed (.ci/run installs it as root)")
		}
		mirror := aptMirror()
		tmp := cache + ".partial"
		os.RemoveAll(tmp)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		start := time.Now()
		out, err := exec.CommandContext(ctx, "debootstrap", "--variant=minbase", debianSuite, tmp, mirror).CombinedOutput()
		if err != nil {
			os.RemoveAll(tmp)
			t.Skipf("install test: debootstrap %s from %s failed (%v); no Debian root to install into:\n%s", debianSuite, mirror, err, tail(string(out), 20))
		}
		if err := os.Rename(tmp, cache); err != nil {
			t.Fatal(err)
		}
		t.Logf("debootstrap %s from %s: %s (cached in %s)", debianSuite, mirror, time.Since(start).Round(time.Second), cache)
	}
	root := filepath.Join(t.TempDir(), "root")
	if out, err := exec.Command("cp", "-a", cache, root).CombinedOutput(); err != nil {
		t.Fatalf("copy the Debian root: %v %s", err, out)
	}
	// /usr/bin: on rpm's scriptlet PATH too (minbase has no systemd, so nothing is replaced).
	for path, body := range map[string]string{"usr/bin/systemctl": fakeSystemctl, "run/systemd/system/.keep": ""} {
		p := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// aptMirror is the Debian mirror of this machine's apt sources (deb822 or one-line), or
// deb.debian.org.
func aptMirror() string {
	paths, _ := filepath.Glob("/etc/apt/sources.list.d/*")
	for _, p := range append([]string{"/etc/apt/sources.list"}, paths...) {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			for _, w := range strings.Fields(sc.Text()) {
				if strings.HasPrefix(w, "#") {
					break
				}
				if (strings.HasPrefix(w, "http://") || strings.HasPrefix(w, "https://")) && strings.HasSuffix(strings.TrimSuffix(w, "/"), "/debian") {
					f.Close()
					return w
				}
			}
		}
		f.Close()
	}
	return "http://deb.debian.org/debian"
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// chrootRoot is the throwaway root and the transcript of what ran in it.
type chrootRoot struct {
	t          *testing.T
	root       string
	transcript *strings.Builder
}

// run runs a command in the root as dpkg would be run on a host, and returns its output and
// the systemctl calls it made (the calls file is emptied for the next step).
func (c chrootRoot) run(step string, args ...string) (out, calls string, err error) {
	c.t.Helper()
	return c.runCmd(step, exec.Command("chroot", append([]string{c.root}, args...)...), args)
}

// rpm runs this machine's rpm on the root (--root: the scriptlets run chrooted into it).
func (c chrootRoot) rpm(step string, args ...string) (out, calls string, err error) {
	c.t.Helper()
	return c.runCmd(step, exec.Command("rpm", append([]string{"--root", c.root, "--nodeps"}, args...)...), append([]string{"rpm"}, args...))
}

func (c chrootRoot) runCmd(step string, cmd *exec.Cmd, args []string) (out, calls string, err error) {
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND=noninteractive", "LC_ALL=C"}
	b, err := cmd.CombinedOutput()
	callsFile := filepath.Join(c.root, "var/log/systemctl.calls")
	cb, _ := os.ReadFile(callsFile)
	os.Remove(callsFile)
	out, calls = string(b), string(cb)
	c.transcript.WriteString("## " + step + "\n$ " + strings.Join(args, " ") + "\n" + out)
	if out != "" && !strings.HasSuffix(out, "\n") {
		c.transcript.WriteString("\n")
	}
	if calls != "" {
		c.transcript.WriteString("systemctl calls: " + strings.ReplaceAll(strings.TrimSpace(calls), "\n", "; ") + "\n")
	}
	if err != nil {
		c.transcript.WriteString("exit: " + err.Error() + "\n")
	}
	return out, calls, err
}

func (c chrootRoot) write(path, body string, mode os.FileMode) {
	c.t.Helper()
	if err := os.MkdirAll(filepath.Dir(filepath.Join(c.root, path)), 0o755); err != nil {
		c.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.root, path), []byte(body), mode); err != nil {
		c.t.Fatal(err)
	}
}

func (c chrootRoot) read(path string) (string, bool) {
	b, err := os.ReadFile(filepath.Join(c.root, path))
	return string(b), err == nil
}

// oldPackages packs the same binary as an older version (0.0.0~old) with tools/pack, for the
// upgrade, and returns the directory holding its .deb and .rpm.
func oldPackages(t *testing.T, repo, dist, describe, arch string) string {
	t.Helper()
	dir := t.TempDir()
	bin := "agentd-" + describe + "-linux-" + arch
	if err := os.Link(filepath.Join(dist, bin), filepath.Join(dir, bin)); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "run", ".", "-dist", dir, "-repo", repo, "-describe", describe, "-version", "0.0.0~old", "-arch", arch, "-format", "deb,rpm")
	cmd.Dir = filepath.Join(repo, "tools", "pack")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tools/pack -version 0.0.0~old: %v\n%s", err, out)
	}
	return dir
}

// checkInstallUpgradePurge installs an older package, upgrades to this release's, and purges
// it, in a throwaway Debian root: an unconfigured agent is never started, a configured one is
// (the env file counts), an upgrade keeps the operator's settings and restarts the agent only
// when it ran, a purge stops it, removes the package's files and keeps the journal.
func checkInstallUpgradePurge(t *testing.T, repo, dist, describe string) {
	arch := runtime.GOARCH
	if _, ok := rpmArch[arch]; !ok {
		t.Skipf("install test: no package for this machine (%s)", arch)
	}
	newDeb, newRPM := distPackages(t, dist, arch)
	oldDeb, oldRPM := distPackages(t, oldPackages(t, repo, dist, describe, arch), arch)
	t.Run("deb", func(t *testing.T) { checkDebInstallUpgradePurge(t, repo, oldDeb, newDeb) })
	t.Run("rpm", func(t *testing.T) { checkRPMInstallUpgradeErase(t, repo, oldRPM, newRPM) })
}

// checkDebInstallUpgradePurge: dpkg in the root, as on a Debian host.
func checkDebInstallUpgradePurge(t *testing.T, repo, oldDeb, newDeb string) {
	root := debianRoot(t, repo)
	for _, p := range []string{oldDeb, newDeb} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "tmp", filepath.Base(p)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var transcript strings.Builder
	c := chrootRoot{t, root, &transcript}
	t.Cleanup(func() { t.Logf("install, upgrade, purge in a %s root:\n%s", debianSuite, transcript.String()) })
	must := func(step string, args ...string) (string, string) {
		t.Helper()
		out, calls, err := c.run(step, args...)
		if err != nil {
			t.Fatalf("%s: %v\n%s", step, err, out)
		}
		return out, calls
	}
	oldIn, newIn := "/tmp/"+filepath.Base(oldDeb), "/tmp/"+filepath.Base(newDeb)

	out, calls := must("install, not configured", "dpkg", "-i", oldIn)
	if !strings.Contains(calls, "daemon-reload") || strings.Contains(calls, "start") || c.enabled() {
		t.Errorf("an unconfigured install: systemctl calls %q, enabled %v; want daemon-reload and no enable or start", calls, c.enabled())
	}
	if !strings.Contains(out, "not started: no backend configured") {
		t.Errorf("an unconfigured install does not say why the agent is not started:\n%s", out)
	}
	if fi, err := os.Stat(filepath.Join(root, "var/lib/agentd")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("/var/lib/agentd after install: %v %v; want mode 0700", fi, err)
	}
	must("the installed binary runs", "/usr/bin/agentd", "version")

	// The operator configures it, systemd runs it, it writes its journal.
	settings := "{\"backend\": \"https://cp.example:8443\", \"runtime\": \"docker\"}\n"
	c.write("etc/agentd/agentd.json", settings, 0o644)
	c.write("var/lib/agentd/journal.db", "the journal", 0o600)
	c.write("run/agentd.active", "", 0o644)
	_, calls = must("upgrade while it runs", "dpkg", "-i", newIn)
	if !strings.Contains(calls, "restart agentd.service") {
		t.Errorf("an upgrade of a running agent: systemctl calls %q; want a restart", calls)
	}
	if got, _ := c.read("etc/agentd/agentd.json"); got != settings {
		t.Errorf("the upgrade replaced the operator's /etc/agentd/agentd.json: %q", got)
	}
	if v, _, _ := c.run("installed version", "dpkg-query", "-W", "-f", "${Version}", "agentd"); strings.Contains(v, "old") {
		t.Errorf("after the upgrade dpkg says version %q", v)
	}

	os.Remove(filepath.Join(root, "run/agentd.active"))
	_, calls = must("reinstall while it is stopped", "dpkg", "-i", newIn)
	if strings.Contains(calls, "restart") || strings.Contains(calls, "start agentd") {
		t.Errorf("an upgrade of a stopped agent: systemctl calls %q; want no start or restart", calls)
	}

	out, calls = must("purge", "dpkg", "--purge", "agentd")
	if !strings.Contains(calls, "stop agentd.service") || !strings.Contains(calls, "daemon-reload") {
		t.Errorf("a purge: systemctl calls %q; want a stop and a daemon-reload", calls)
	}
	for _, gone := range []string{"usr/bin/agentd", "etc/agentd/agentd.json", "lib/systemd/system/agentd.service"} {
		if _, ok := c.read(gone); ok {
			t.Errorf("/%s is still there after the purge", gone)
		}
	}
	if got, ok := c.read("var/lib/agentd/journal.db"); !ok || got != "the journal" {
		t.Errorf("the purge removed the journal (it names containers that may still run)")
	}
	if !strings.Contains(out, "/var/lib/agentd kept") {
		t.Errorf("the purge does not say it kept /var/lib/agentd:\n%s", out)
	}

	// Configured before the package arrives, in the unit's env file: started at install. The
	// file is data, read as systemd reads it: nothing in it runs as shell.
	c.write("etc/agentd/agentd.env", "AGENTD_BACKEND=https://cp.example:8443\nEXTRA=$(touch /envfile-ran)\n", 0o600)
	_, calls = must("install, configured in agentd.env", "dpkg", "-i", newIn)
	if !c.enabled() || !strings.Contains(calls, "start agentd.service") {
		t.Errorf("a configured install: systemctl calls %q, enabled %v; want enabled and started", calls, c.enabled())
	}
	if _, ran := c.read("envfile-ran"); ran {
		t.Error("the install script ran /etc/agentd/agentd.env as shell")
	}
	checkDebHonoursPolicyRCD(t, must, c, newIn)
	checkDebReinstallAfterRemove(t, must, c, newIn)
}

// checkDebReinstallAfterRemove: a removal (not a purge) masks the unit; installing the package
// again unmasks it and gives back the enablement it had, so `systemctl enable --now` works.
func checkDebReinstallAfterRemove(t *testing.T, must func(string, ...string) (string, string), c chrootRoot, deb string) {
	t.Helper()
	if !c.enabled() {
		t.Fatal("the scenario wants an enabled agent to remove")
	}
	must("remove", "dpkg", "-r", "agentd")
	must("install again after the removal", "dpkg", "-i", deb)
	if target, err := os.Readlink(filepath.Join(c.root, "etc/systemd/system/agentd.service")); err == nil && target == "/dev/null" {
		t.Error("a reinstall after a removal left the unit masked")
	}
	if !c.enabled() {
		t.Error("a reinstall after a removal lost the unit's enablement")
	}
}

// checkDebHonoursPolicyRCD: where an image build or chroot forbids starting services
// (policy-rc.d exit 101), the package installs and enables the unit, and starts or restarts
// nothing. It leaves the root configured, with the package installed.
func checkDebHonoursPolicyRCD(t *testing.T, must func(string, ...string) (string, string), c chrootRoot, deb string) {
	t.Helper()
	must("purge before the image build", "dpkg", "--purge", "agentd")
	c.write("usr/sbin/policy-rc.d", denyStarts, 0o755)
	out, calls := must("install, configured, where policy-rc.d forbids starts", "dpkg", "-i", deb)
	if strings.Contains(calls, "start") || !c.enabled() {
		t.Errorf("an install under a policy-rc.d that forbids starts: systemctl calls %q, enabled %v; want enabled and nothing started", calls, c.enabled())
	}
	if !strings.Contains(out, "policy-rc.d returned 101") {
		t.Errorf("the install does not say policy-rc.d kept the agent from starting:\n%s", out)
	}
	c.write("run/agentd.active", "", 0o644)
	if _, calls = must("upgrade where policy-rc.d forbids starts", "dpkg", "-i", deb); strings.Contains(calls, "restart") {
		t.Errorf("an upgrade under a policy-rc.d that forbids starts: systemctl calls %q; want no restart", calls)
	}
}

// checkRPMInstallUpgradeErase does for the .rpm what the .deb's test does, with this machine's
// rpm on another throwaway root: an unconfigured install is not started, an upgrade keeps the
// operator's settings and restarts only a running agent (the old package's %postun), an erase
// stops it and keeps the journal.
func checkRPMInstallUpgradeErase(t *testing.T, repo, oldRPM, newRPM string) {
	if _, err := exec.LookPath("rpm"); err != nil {
		t.Skip("rpm is not installed (.ci/run installs it as root)")
	}
	var transcript strings.Builder
	c := chrootRoot{t, debianRoot(t, repo), &transcript}
	t.Cleanup(func() { t.Logf("rpm install, upgrade, erase in a %s root:\n%s", debianSuite, transcript.String()) })
	must := func(step string, args ...string) (string, string) {
		t.Helper()
		out, calls, err := c.rpm(step, args...)
		if err != nil {
			t.Fatalf("%s: %v\n%s", step, err, out)
		}
		return out, calls
	}
	out, calls := must("install, not configured", "-i", oldRPM)
	if !strings.Contains(calls, "daemon-reload") || strings.Contains(calls, "start") || strings.Contains(calls, "enable") {
		t.Errorf("an unconfigured install: systemctl calls %q; want daemon-reload and no enable or start", calls)
	}
	if !strings.Contains(out, "not started: no backend configured") {
		t.Errorf("an unconfigured install does not say why the agent is not started:\n%s", out)
	}
	settings := "{\"backend\": \"https://cp.example:8443\"}\n"
	c.write("etc/agentd/agentd.json", settings, 0o644)
	c.write("var/lib/agentd/journal.db", "the journal", 0o600)
	c.write("run/agentd.active", "", 0o644)
	_, calls = must("upgrade while it runs", "-U", newRPM)
	if !strings.Contains(calls, "restart agentd.service") {
		t.Errorf("an upgrade of a running agent: systemctl calls %q; want a restart", calls)
	}
	if got, _ := c.read("etc/agentd/agentd.json"); got != settings {
		t.Errorf("the upgrade replaced the operator's /etc/agentd/agentd.json: %q", got)
	}
	os.Remove(filepath.Join(c.root, "run/agentd.active"))
	_, calls = must("reinstall while it is stopped", "-U", "--replacepkgs", newRPM)
	if strings.Contains(calls, "restart") || strings.Contains(calls, "start agentd") {
		t.Errorf("an upgrade of a stopped agent: systemctl calls %q; want no start or restart", calls)
	}
	_, calls = must("erase", "-e", "agentd")
	if !strings.Contains(calls, "stop agentd.service") || !strings.Contains(calls, "daemon-reload") {
		t.Errorf("an erase: systemctl calls %q; want a stop and a daemon-reload", calls)
	}
	if _, ok := c.read("usr/bin/agentd"); ok {
		t.Error("/usr/bin/agentd is still there after the erase")
	}
	if got, ok := c.read("var/lib/agentd/journal.db"); !ok || got != "the journal" {
		t.Error("the erase removed the journal (it names containers that may still run)")
	}
}
