package lazyfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// mountForTest mounts a fresh lazy file system, or skips saying why it cannot.
func mountForTest(t *testing.T, o Options) (*FS, string) {
	t.Helper()
	if err := Available(); err != nil {
		t.Skipf("no FUSE here: %v", err)
	}
	backing, mnt := t.TempDir(), t.TempDir()
	f, err := Mount(backing, mnt, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, mnt
}

func writeFile(path, content string, sync bool) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(content); err != nil {
		f.Close()
		return err
	}
	if sync {
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// powerCutScenario is the lazy file system's own contract, run on a mount: what was synced
// (data by the file's fsync, names by the directory's) survives a power cut, nothing else does.
// It returns what broke, so the test of the test can run it on a file system that forgets.
func powerCutScenario(f *FS, mnt string) error {
	steps := []struct {
		what string
		do   func() error
	}{
		{"durable file", func() error { return writeFile(filepath.Join(mnt, "synced"), "kept", true) }},
		{"old", func() error { return writeFile(filepath.Join(mnt, "old"), "old", true) }},
		{"sync their names", func() error { return syncDir(mnt) }},
		{"unsynced file", func() error { return writeFile(filepath.Join(mnt, "unsynced"), "lost", false) }},
		{"synced data, unsynced name", func() error { return writeFile(filepath.Join(mnt, "nameless"), "lost", true) }},
		{"rename without directory sync", func() error {
			if err := writeFile(filepath.Join(mnt, "new.tmp"), "new", true); err != nil {
				return err
			}
			return os.Rename(filepath.Join(mnt, "new.tmp"), filepath.Join(mnt, "old"))
		}},
		{"append to the durable file, unsynced", func() error {
			g, err := os.OpenFile(filepath.Join(mnt, "synced"), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				return err
			}
			defer g.Close()
			_, err = g.WriteString(" and more")
			return err
		}},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			return fmt.Errorf("%s: %w", s.what, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(mnt, "unsynced")); err != nil || string(b) != "lost" {
		return fmt.Errorf("before the cut, reads see the unsynced write: got %q, %v", b, err)
	}
	if _, err := f.PowerCut(); err != nil {
		return err
	}
	var errs []error
	for name, want := range map[string]string{"synced": "kept", "old": "old", "unsynced": "", "nameless": "", "new.tmp": ""} {
		b, err := os.ReadFile(filepath.Join(mnt, name))
		switch {
		case want == "" && !errors.Is(err, os.ErrNotExist):
			errs = append(errs, fmt.Errorf("%s survived the power cut (%q, %v): it was never synced", name, b, err))
		case want != "" && string(b) != want:
			errs = append(errs, fmt.Errorf("%s after the power cut: %q, %v; want %q", name, b, err, want))
		}
	}
	return errors.Join(errs...)
}

func TestAPowerCutKeepsOnlyWhatWasSynced(t *testing.T) {
	if !dropUnsynced {
		t.Skip("built with lazyfsforgets: TestAForgetfulFSFailsTheScenario runs instead")
	}
	f, mnt := mountForTest(t, Options{KeepLog: true})
	if err := powerCutScenario(f, mnt); err != nil {
		t.Fatal(err)
	}
	// The mount works on after the cut, and the log starts again.
	if err := writeFile(filepath.Join(mnt, "after"), "x", true); err != nil {
		t.Fatal(err)
	}
	if n := len(f.Tracker().Log()); n == 0 {
		t.Fatal("nothing logged after the power cut")
	}
}

func TestTheLogNamesEveryOperationWithItsBarrier(t *testing.T) {
	f, mnt := mountForTest(t, Options{KeepLog: true})
	if err := writeFile(filepath.Join(mnt, "a"), "hello", true); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(mnt, "a"), filepath.Join(mnt, "b")); err != nil {
		t.Fatal(err)
	}
	if err := syncDir(mnt); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, op := range f.Tracker().Log() {
		got = append(got, fmt.Sprintf("%s %s b%d", op.Kind, op.Path, op.Barrier))
	}
	want := []string{"create a b0", "truncate a b0", "write a b0", "fsync a b0", "rename a b1", "fsyncdir  b1"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("log:\n%v\nwant\n%v", got, want)
	}
	if b, ok := f.Tracker().Durable().ReadFile("b"); !ok || string(b) != "hello" {
		t.Fatalf("durable b = %q, %v", b, ok)
	}
}
