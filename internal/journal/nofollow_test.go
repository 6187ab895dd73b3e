package journal

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestPidFileNeverWrittenThroughASymlink: a symlink planted as journal.db.pid makes Open fail
// naming it, and its target keeps its content; a stale regular pid file (a crash) is replaced.
func TestPidFileNeverWrittenThroughASymlink(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	os.WriteFile(victim, []byte("precious"), 0o600)
	path := filepath.Join(dir, FileName)
	os.Symlink(victim, path+".pid")
	j, err := Open(path, Options{})
	if err == nil {
		j.Close()
		t.Fatal("opened with a planted pid symlink")
	}
	if !strings.Contains(err.Error(), ".pid") {
		t.Fatalf("error does not name the pid file: %v", err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious" {
		t.Fatalf("the symlink's target was overwritten: %q", b)
	}
	os.Remove(path + ".pid")
	os.WriteFile(path+".pid", []byte("99999\n"), 0o600) // left by a process that died
	j, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if b, _ := os.ReadFile(path + ".pid"); strings.TrimSpace(string(b)) != strconv.Itoa(os.Getpid()) {
		t.Fatalf("pid file holds %q", b)
	}
}

func TestJournalFileNeverOpenedThroughASymlink(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(t.TempDir(), "elsewhere.db")
	os.Symlink(real, filepath.Join(dir, FileName))
	j, err := Open(filepath.Join(dir, FileName), Options{})
	if err == nil {
		j.Close()
		t.Fatal("opened a journal through a symlink")
	}
	if !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("error: %v", err)
	}
	if _, err := os.Stat(real); err == nil {
		t.Fatal("the symlink's target was created")
	}
}
