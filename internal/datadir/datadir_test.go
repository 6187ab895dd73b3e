package datadir_test

import (
	"os"
	"path/filepath"
	"strings"
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
