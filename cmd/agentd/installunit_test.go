package main

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestInstallUnitNeverWritesThroughALink: a link at the unit's path is refused, with or
// without --force, naming the link and what it points to; a masked unit (a link to /dev/null)
// says how to unmask; the file a link names is never written, nor created.
func TestInstallUnitNeverWritesThroughALink(t *testing.T) {
	cases := map[string]struct {
		target string // "" : a file of the test's, holding "precious"
		want   []string
	}{
		"masked":   {"/dev/null", []string{"masked", "systemctl unmask agentd", "/dev/null"}},
		"a file":   {"", []string{"symbolic link to", "never writes through a link", "rm "}},
		"dangling": {"missing", []string{"symbolic link to", "missing"}},
	}
	for name, c := range cases {
		for _, force := range []bool{false, true} {
			dir := t.TempDir()
			target := c.target
			switch target {
			case "":
				target = filepath.Join(t.TempDir(), "victim")
				if err := os.WriteFile(target, []byte("precious"), 0o600); err != nil {
					t.Fatal(err)
				}
			case "missing":
				target = filepath.Join(t.TempDir(), "missing")
			}
			link := filepath.Join(dir, "agentd.service")
			if err := os.Symlink(target, link); err != nil {
				t.Fatal(err)
			}
			err := (&installUnitCmd{Dir: dir, Force: force}).install(io.Discard)
			if err == nil {
				t.Errorf("%s, --force=%v: wrote through the link", name, force)
				continue
			}
			for _, w := range append(c.want, link, target) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s, --force=%v: %v; want it to say %q", name, force, err, w)
				}
			}
			if got, _ := os.Readlink(link); got != target {
				t.Errorf("%s, --force=%v: the link now points to %q", name, force, got)
			}
			switch b, err := os.ReadFile(target); c.target {
			case "":
				if string(b) != "precious" {
					t.Errorf("%s, --force=%v: the link's target now holds %q", name, force, b)
				}
			case "missing":
				if err == nil {
					t.Errorf("%s, --force=%v: the dangling link's target was created", name, force)
				}
			}
			if left, _ := filepath.Glob(filepath.Join(dir, ".agentd.service.tmp-*")); len(left) != 0 {
				t.Errorf("%s: temporary files left: %v", name, left)
			}
		}
	}
}

// TestInstallUnitForceReplacesAFileByRename: --force puts a new file in place (a new inode),
// so a hard link or an open reader of the old one never sees a half-written unit.
func TestInstallUnitForceReplacesAFileByRename(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agentd.service")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(t.TempDir(), "hardlink")
	if err := os.Link(path, other); err != nil {
		t.Fatal(err)
	}
	if err := (&installUnitCmd{Dir: dir, Force: true}).install(io.Discard); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(other); string(b) != "old" {
		t.Errorf("the old file was written in place: its other name reads %q", b)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o644 {
		t.Fatalf("unit: %v, mode %v; want 0644", err, st.Mode().Perm())
	}
}

// TestInstallUnitBinaryPathsForSystemd: ExecStart gets --binary as systemd reads it: spaces
// quoted, '%' doubled; what systemd refuses in an executable's name is refused by name.
func TestInstallUnitBinaryPathsForSystemd(t *testing.T) {
	cases := []struct{ binary, exec, err string }{
		{"/opt/agentd/bin/agentd", "ExecStart=/opt/agentd/bin/agentd run", ""},
		{"/opt/my agent/agentd", `ExecStart="/opt/my agent/agentd" run`, ""},
		{"/opt/100%/agentd", "ExecStart=/opt/100%%/agentd run", ""},
		{"/opt/a b%c;d/agentd", `ExecStart="/opt/a b%%c;d/agentd" run`, ""},
		{"/opt/$HOME/agentd", "", "'$'"},
		{`/opt/"q"/agentd`, "", `'"'`},
		{"/opt/it's/agentd", "", `'\''`},
		{`/opt/back\slash/agentd`, "", `'\\'`},
		{"/opt/a\tb/agentd", "", "control character U+0009"},
		{"/opt/a\nExecStartPre=/bin/sh/agentd", "", "control character U+000A"},
		{"/opt/\xff/agentd", "", "UTF-8"},
		{"agentd", "", "absolute"},
	}
	for _, c := range cases {
		dir := t.TempDir()
		err := (&installUnitCmd{Dir: dir, Binary: c.binary}).install(io.Discard)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), "--binary") || !strings.Contains(err.Error(), c.err) {
				t.Errorf("--binary %q: %v; want a refusal naming the flag and %s", c.binary, err, c.err)
			}
			if _, serr := os.Stat(filepath.Join(dir, "agentd.service")); serr == nil {
				t.Errorf("--binary %q: a unit was written", c.binary)
			}
			continue
		}
		if err != nil {
			t.Errorf("--binary %q: %v", c.binary, err)
			continue
		}
		b, _ := os.ReadFile(filepath.Join(dir, "agentd.service"))
		if got := execStartLine(string(b)); got != c.exec {
			t.Errorf("--binary %q: %q; want %q", c.binary, got, c.exec)
		}
	}
}

func execStartLine(unit string) string {
	for _, l := range strings.Split(unit, "\n") {
		if strings.HasPrefix(l, "ExecStart=") {
			return l
		}
	}
	return ""
}

// TestInstallUnitVerifiedBySystemd: systemd itself (systemd-analyze verify, which checks that
// ExecStart's executable exists) reads the unit written for a binary whose path has a space,
// a '%' and a ';' as that very path.
func TestInstallUnitVerifiedBySystemd(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed: the unit's parse is checked by TestInstallUnitBinaryPathsForSystemd only")
	}
	bin := filepath.Join(t.TempDir(), "my agent; 100%", "agentd")
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := (&installUnitCmd{Dir: dir, Binary: bin}).install(io.Discard); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", filepath.Join(dir, "agentd.service")).CombinedOutput()
	if err != nil || strings.Contains(strings.ToLower(string(out)), "exec") {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	// The check can fail: the same unit with the path unquoted is refused.
	unit, _ := os.ReadFile(filepath.Join(dir, "agentd.service"))
	broken := strings.Replace(string(unit), execStartLine(string(unit)), "ExecStart="+bin+" run", 1)
	if err := os.WriteFile(filepath.Join(dir, "agentd.service"), []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(analyze, "verify", filepath.Join(dir, "agentd.service")).CombinedOutput(); err == nil {
		t.Fatalf("systemd-analyze verify accepted an unquoted path with a space:\n%s", out)
	}
}
