package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestPackageVersion: every shape of git describe maps to a version, and each pair that git
// orders (an rc before its release, a release before the commits after it, an untagged commit
// before a later one) dpkg orders the same way, where dpkg is installed.
func TestPackageVersion(t *testing.T) {
	for _, c := range []struct {
		describe string
		commits  int
		want     string
	}{
		{"v1.2.3", 10, "1.2.3"},
		{"1.2.3", 10, "1.2.3"},
		{"v1.2.3-rc1", 10, "1.2.3~rc1"},
		{"v1.2.3-4-gabc1234", 14, "1.2.3+git4.gabc1234"},
		{"v1.2.3-rc.2-4-gabc1234", 14, "1.2.3~rc.2+git4.gabc1234"},
		{"v1.2.3-4-gabc1234-dirty", 14, "1.2.3+git4.gabc1234.dirty"},
		{"v1.2.3-dirty", 10, "1.2.3+dirty"},
		{"acd7a31", 206, "0.0.0+git206.gacd7a31"},
		{"acd7a31-dirty", 206, "0.0.0+git206.gacd7a31.dirty"},
	} {
		got, err := packageVersion(c.describe, c.commits)
		if err != nil || got != c.want {
			t.Errorf("packageVersion(%q, %d) = %q, %v; want %q", c.describe, c.commits, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "dev", "v1.2", "1.2.3 4", "acd7a31;rm"} {
		if got, err := packageVersion(bad, 5); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("packageVersion(%q) = %q, %v; want an error naming it", bad, got, err)
		}
	}
	if _, err := packageVersion("acd7a31", 0); err == nil {
		t.Error("an untagged describe without a commit count was accepted: its builds would not be ordered")
	}
	ordered := [][2]string{
		{"1.2.3~rc1", "1.2.3"},
		{"1.2.3", "1.2.3+git4.gabc1234"},
		{"1.2.3+git4.gabc1234", "1.2.3+git5.g0123abc"},
		{"0.0.0+git206.gacd7a31", "0.0.0+git207.g0123abc"},
		{"0.0.0+git999.gfff", "0.0.1"},
		{"0.0.0~old", "0.0.0+git1.g0000000"}, // the install test's older package
	}
	if _, err := exec.LookPath("dpkg"); err == nil {
		for _, pair := range ordered {
			if err := exec.Command("dpkg", "--compare-versions", pair[0], "lt", pair[1]).Run(); err != nil {
				t.Errorf("dpkg does not order %s before %s", pair[0], pair[1])
			}
		}
	} else {
		t.Log("dpkg is not installed: its order is not checked")
	}
	if _, err := exec.LookPath("rpm"); err == nil {
		for _, pair := range ordered {
			out, err := exec.Command("rpm", "--eval", `%{lua: print(rpm.vercmp("`+pair[0]+`", "`+pair[1]+`"))}`).Output()
			if err != nil || strings.TrimSpace(string(out)) != "-1" {
				t.Errorf("rpm does not order %s before %s: %q %v", pair[0], pair[1], out, err)
			}
		}
	} else {
		t.Log("rpm is not installed: its order is not checked")
	}
}

// TestPackagedUnitRunsTheInstalledBinary: the packaged unit's ExecStart is /usr/bin/agentd;
// a unit without exactly one /usr/local/bin ExecStart is refused rather than shipped as is.
func TestPackagedUnitRunsTheInstalledBinary(t *testing.T) {
	got, err := packagedUnit([]byte("[Service]\nExecStart=/usr/local/bin/agentd run\nRestart=on-failure\n"))
	if err != nil || string(got) != "[Service]\nExecStart=/usr/bin/agentd run\nRestart=on-failure\n" {
		t.Fatalf("packagedUnit = %q, %v", got, err)
	}
	for _, unit := range []string{"[Service]\nExecStart=/opt/agentd run\n", "\nExecStart=/usr/local/bin/agentd run\nExecStart=/usr/local/bin/agentd x\n"} {
		if _, err := packagedUnit([]byte(unit)); err == nil || !strings.Contains(err.Error(), "deploy/agentd.service") {
			t.Errorf("packagedUnit(%q): %v; want an error naming deploy/agentd.service", unit, err)
		}
	}
}

// TestWrap: changelog lines stay within their width, and no word is lost.
func TestWrap(t *testing.T) {
	s := "docker: bind roots are checked against who serves the engine's socket (SO_PEERCRED): a pid of 0 means agentd is in a pid namespace"
	got := wrap(s, 40)
	for _, line := range strings.Split(got, "\n") {
		if len(line) > 40 {
			t.Errorf("line %q is longer than 40", line)
		}
	}
	if strings.Join(strings.Fields(got), " ") != s {
		t.Errorf("wrap lost words: %q", got)
	}
}

// TestVersionFlagIsChecked: a -version that is not a package version (it names the files
// written) is refused before anything is written.
func TestVersionFlagIsChecked(t *testing.T) {
	for _, v := range []string{"../1.0", "1.0/x", "v1.0", "1.0 beta", "1:2.0"} {
		if _, err := run(options{describe: "abc1234", version: v, repo: ".", dist: t.TempDir(), archs: "amd64", formats: "deb"}); err == nil || !strings.Contains(err.Error(), "-version") {
			t.Errorf("-version %q: %v; want an error naming -version", v, err)
		}
	}
}

// TestMaintainer: a given maintainer is checked and kept; without one the builder's git
// identity signs the packages, and without that the packages say they are an unofficial build.
func TestMaintainer(t *testing.T) {
	if got, err := maintainer("Ada Lovelace <ada@example.org>", "."); err != nil || got != "Ada Lovelace <ada@example.org>" {
		t.Errorf("maintainer(given) = %q, %v", got, err)
	}
	for _, bad := range []string{"ada@example.org", "Ada <not an address>", "<ada@example.org>"} {
		if _, err := maintainer(bad, "."); err == nil || !strings.Contains(err.Error(), "-maintainer") {
			t.Errorf("maintainer(%q): %v; want an error naming -maintainer", bad, err)
		}
	}
	dir := t.TempDir()
	if out, err := exec.Command("git", "init", "-q", dir).CombinedOutput(); err != nil {
		t.Skipf("git init: %v %s", err, out)
	}
	t.Setenv("GIT_CONFIG_GLOBAL", "/dev/null")
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	if got, err := maintainer("", dir); err != nil || got != unofficialMaintainer {
		t.Errorf("maintainer without a git identity = %q, %v; want %q", got, err, unofficialMaintainer)
	}
	for k, v := range map[string]string{"user.name": "Grace Hopper", "user.email": "grace@example.org"} {
		if out, err := exec.Command("git", "-C", dir, "config", k, v).CombinedOutput(); err != nil {
			t.Fatalf("git config %s: %v %s", k, err, out)
		}
	}
	if got, err := maintainer("", dir); err != nil || got != "Grace Hopper <grace@example.org>" {
		t.Errorf("maintainer from git config = %q, %v", got, err)
	}
}
