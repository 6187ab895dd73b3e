package datadir_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agentd/agentd/internal/datadir"
)

func TestCreatedPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "data")
	if err := datadir.Prepare(dir); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(dir)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("created with %v (%v), want 0700", st.Mode().Perm(), err)
	}
}

func TestWritableByOthersRefused(t *testing.T) {
	for _, mode := range []os.FileMode{0o777, 0o770, 0o702, 0o720} {
		dir := filepath.Join(t.TempDir(), "data")
		os.Mkdir(dir, 0o700)
		os.Chmod(dir, mode)
		err := datadir.Prepare(dir)
		if err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "chmod 700") {
			t.Errorf("mode %04o: %v; want a refusal naming the directory and the fix", mode, err)
		}
	}
	dir := filepath.Join(t.TempDir(), "readable")
	os.Mkdir(dir, 0o755)
	os.Chmod(dir, 0o755)
	if err := datadir.Prepare(dir); err != nil {
		t.Errorf("0755 (not writable by others): %v", err)
	}
}

func TestOwnedByAnotherUserRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a directory away")
	}
	dir := filepath.Join(t.TempDir(), "data")
	os.Mkdir(dir, 0o700)
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Skip(err)
	}
	if err := datadir.Prepare(dir); err == nil || !strings.Contains(err.Error(), "uid 65534") {
		t.Fatalf("owned by nobody: %v", err)
	}
}

func TestSymlinkedFileRefused(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	os.WriteFile(victim, []byte("precious"), 0o600)
	os.Symlink(victim, filepath.Join(dir, "journal.db.pid"))
	err := datadir.Prepare(dir, "journal.db", "journal.db.pid")
	if err == nil || !strings.Contains(err.Error(), "journal.db.pid") || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("symlinked pid file: %v", err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious" {
		t.Fatal("the victim was touched")
	}
}

// TestReadPrivateRefusesWhatIsNotTheAgentsOwn: a secret file (the seal key, the registry
// credentials) is read only when it is a regular file of the agent's uid, 0600 or stricter,
// not a link, and small; each refusal says why and how to fix it.
func TestReadPrivateRefusesWhatIsNotTheAgentsOwn(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	if err := os.WriteFile(good, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		make func(path string) error
		want string // "" : read
	}{
		"0600":                {func(p string) error { return os.WriteFile(p, []byte("secret"), 0o600) }, ""},
		"0400":                {func(p string) error { return os.WriteFile(p, []byte("secret"), 0o400) }, ""},
		"group readable":      {func(p string) error { return writeMode(p, 0o640) }, "mode 0640 lets group or others read or write it; want 0600 (chmod 600 "},
		"world readable":      {func(p string) error { return writeMode(p, 0o644) }, "mode 0644"},
		"group writable":      {func(p string) error { return writeMode(p, 0o620) }, "mode 0620"},
		"link to a good file": {func(p string) error { return os.Symlink(good, p) }, "symbolic link"},
		"dangling link":       {func(p string) error { return os.Symlink(filepath.Join(dir, "nowhere"), p) }, "symbolic link"},
		"directory":           {func(p string) error { return os.Mkdir(p, 0o700) }, "not a regular file but a directory"},
		"fifo":                {func(p string) error { return syscall.Mkfifo(p, 0o600) }, "not a regular file but a named pipe"},
		"too big":             {func(p string) error { return os.WriteFile(p, make([]byte, 65), 0o600) }, "65 bytes, more than the 64"},
		"missing":             {func(string) error { return nil }, "no such file"},
	}
	if os.Geteuid() == 0 {
		cases["owned by nobody"] = struct {
			make func(path string) error
			want string
		}{func(p string) error {
			if err := os.WriteFile(p, []byte("secret"), 0o600); err != nil {
				return err
			}
			return os.Chown(p, 65534, 65534)
		}, "owned by uid 65534, not by this agent's uid 0"}
	}
	for name, c := range cases {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if err := c.make(path); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		b, fi, err := datadir.ReadPrivate(path, 64)
		switch {
		case c.want == "" && (err != nil || string(b) != "secret" || fi == nil):
			t.Errorf("%s: %q, %v; want it read", name, b, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %q, %v; want a refusal saying %q", name, b, err, c.want)
		}
	}
	if _, _, err := datadir.ReadPrivate(filepath.Join(dir, "missing"), 64); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file: %v; want it to wrap os.ErrNotExist", err)
	}
}

func writeMode(path string, mode os.FileMode) error {
	if err := os.WriteFile(path, []byte("secret"), 0o600); err != nil {
		return err
	}
	return os.Chmod(path, mode)
}

// TestReadTrustedRefusesWhatOthersCouldRewrite: a CA file decides whom the agent believes, so
// one that group or others can write, one owned by another user, a FIFO (which would hang the
// start) or a device is refused, saying why; a link is followed to a file that passes.
func TestReadTrustedRefusesWhatOthersCouldRewrite(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	if err := os.WriteFile(good, []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		make func(path string) error
		want string // "" : read
	}{
		"0644":                {func(p string) error { return writeMode(p, 0o644) }, ""},
		"0600":                {func(p string) error { return writeMode(p, 0o600) }, ""},
		"link to a good file": {func(p string) error { return os.Symlink(good, p) }, ""},
		"group writable":      {func(p string) error { return writeMode(p, 0o664) }, "mode 0664 lets group or others write it"},
		"world writable":      {func(p string) error { return writeMode(p, 0o646) }, "mode 0646"},
		"fifo":                {func(p string) error { return syscall.Mkfifo(p, 0o644) }, "not a regular file but a named pipe"},
		"directory":           {func(p string) error { return os.Mkdir(p, 0o755) }, "not a regular file but a directory"},
		"too big":             {func(p string) error { return os.WriteFile(p, make([]byte, 65), 0o644) }, "more than the 64 bytes"},
		"missing":             {func(string) error { return nil }, "no such file"},
	}
	if os.Geteuid() == 0 {
		cases["owned by nobody"] = struct {
			make func(path string) error
			want string
		}{func(p string) error {
			if err := writeMode(p, 0o644); err != nil {
				return err
			}
			return os.Chown(p, 65534, 65534)
		}, "owned by uid 65534, neither root nor this agent's uid"}
	}
	for name, c := range cases {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if err := c.make(path); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		b, err := datadir.ReadTrusted(path, 64)
		switch {
		case c.want == "" && (err != nil || string(b) != "secret"):
			t.Errorf("%s: %q, %v; want it read", name, b, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %q, %v; want a refusal saying %q", name, b, err, c.want)
		}
	}
}

// TestReadTrustedRefusesAPathOthersCouldRedirect: a root-owned 0644 CA file is only as
// trustworthy as the directories on its way. In one others can write, or another user owns,
// they could swap it (or a link to it) for a file of their choosing before the agent starts;
// a link is judged by its own directory and by its target's. A sticky directory (like /tmp)
// is fine when the entry taken from it is root's or the agent's.
func TestReadTrustedRefusesAPathOthersCouldRedirect(t *testing.T) {
	base := t.TempDir()
	mkdir := func(name string, mode os.FileMode) string {
		d := filepath.Join(base, name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
		return d
	}
	open, sticky, shared := mkdir("open", 0o755), mkdir("sticky", os.ModeSticky|0o777), mkdir("shared", 0o777)
	for _, d := range []string{open, sticky, shared} {
		if err := writeMode(filepath.Join(d, "ca.pem"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(shared, "ca.pem"), filepath.Join(open, "to-shared")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(open, "ca.pem"), filepath.Join(shared, "to-open")); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		path, want string // want "": read
	}{
		{filepath.Join(open, "ca.pem"), ""},
		{filepath.Join(sticky, "ca.pem"), ""},
		{filepath.Join(shared, "ca.pem"), "directory " + shared + " on its path (mode 0777) is writable by group or others"},
		{filepath.Join(open, "to-shared"), "directory " + shared + " on its path"},
		{filepath.Join(shared, "to-open"), "directory " + shared + " on its path"},
		{filepath.Join(shared, "..", "open", "ca.pem"), ""},
	}
	if os.Geteuid() == 0 {
		nobodys := mkdir("nobodys", 0o755)
		if err := writeMode(filepath.Join(nobodys, "ca.pem"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(nobodys, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		cases = append(cases, struct{ path, want string }{filepath.Join(nobodys, "ca.pem"), "directory " + nobodys + " on its path belongs to uid 65534"})
	}
	for _, c := range cases {
		b, err := datadir.ReadTrusted(c.path, 64)
		switch {
		case c.want == "" && (err != nil || string(b) != "secret"):
			t.Errorf("%s: %q, %v; want it read", c.path, b, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %q, %v; want a refusal saying %q", c.path, b, err, c.want)
		}
	}
}
