package bindroot

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeProc lays out the /proc files the namespace check reads.
func fakeProc(t *testing.T, selfNS, hostNS, selfRoot, hostRoot, nspid string) string {
	t.Helper()
	proc := t.TempDir()
	for _, p := range []struct{ pid, ns, root string }{{"self", selfNS, selfRoot}, {"1", hostNS, hostRoot}} {
		must(t, os.MkdirAll(filepath.Join(proc, p.pid, "ns"), 0o755))
		if p.ns != "" {
			must(t, os.Symlink(p.ns, filepath.Join(proc, p.pid, "ns", "mnt")))
		}
		info := "22 27 0:21 / /proc rw - proc proc rw\n" + p.root + " 1 254:0 / / rw - ext4 /dev/vda rw\n"
		must(t, os.WriteFile(filepath.Join(proc, p.pid, "mountinfo"), []byte(info), 0o644))
	}
	must(t, os.WriteFile(filepath.Join(proc, "self", "status"), []byte("Name:\tagentd\nNSpid:\t"+nspid+"\n"), 0o644))
	return proc
}

func TestBindRootsNeedTheHostsNamespaces(t *testing.T) {
	for _, c := range []struct {
		name                                    string
		selfNS, hostNS, selfRoot, hostRoot, pid string
		want                                    string // "" = accepted
	}{
		{"same namespace", "mnt:[1]", "mnt:[1]", "27", "27", "42", ""},
		{"a private namespace (the shipped unit)", "mnt:[2]", "mnt:[1]", "44", "27", "42", "agentd-bind-roots.conf"},
		{"pid 1 unreadable, same root mount", "mnt:[1]", "", "27", "27", "42", ""},
		{"pid 1 unreadable, another root mount", "mnt:[2]", "", "44", "27", "42", "its root is mount 44, that of pid 1 is mount 27"},
		{"a nested pid namespace", "mnt:[1]", "mnt:[1]", "27", "27", "42 7", "pid namespace"},
	} {
		err := checkNamespaces(fakeProc(t, c.selfNS, c.hostNS, c.selfRoot, c.hostRoot, c.pid))
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v; want accepted", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "--allow-bind-root")):
			t.Errorf("%s: %v; want refused naming --allow-bind-root and %q", c.name, err, c.want)
		}
	}
	// Nothing of pid 1 readable: said so, not guessed.
	proc := fakeProc(t, "mnt:[1]", "", "27", "27", "42")
	must(t, os.Remove(filepath.Join(proc, "1", "mountinfo")))
	if err := checkNamespaces(proc); err == nil || !strings.Contains(err.Error(), "cannot tell") {
		t.Fatalf("pid 1 unreadable: %v; want refused, saying so", err)
	}
	// This machine: the test runs in the host's namespaces.
	if err := CheckHostNamespaces(); err != nil {
		t.Logf("this process: %v", err)
	}
}
