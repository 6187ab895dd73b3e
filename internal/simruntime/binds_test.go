package simruntime

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/docker"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/runtime"
)

// linkTree makes an allowed root with inside/x and shared/escape, a link to a directory
// beside the root.
func linkTree(t *testing.T) (root string) {
	t.Helper()
	base := t.TempDir()
	root = filepath.Join(base, "root")
	for _, d := range []string{root + "/shared", root + "/inside/x", base + "/outside"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(base+"/outside", root+"/shared/escape"); err != nil {
		t.Fatal(err)
	}
	return root
}

// The simulated runtime refuses what the Docker runtime refuses, by the same rule, and says
// which mount, which source and which root.
func TestSimRefusesLinkedBindSources(t *testing.T) {
	root := linkTree(t)
	roots, err := docker.OpenBindRoots([]string{root})
	if err != nil {
		t.Fatal(err)
	}
	defer roots.Close()
	sim, err := Open(t.TempDir(), "agent-binds", nil)
	if err != nil {
		t.Fatal(err)
	}
	mount := func(src string) runtime.CreateSpec {
		return runtime.CreateSpec{Task: "task/b", Container: event.ContainerSpec{Name: "app", Image: "img",
			Mounts: []event.Mount{{Type: event.MountTmpfs, Target: "/t"}, {Type: event.MountBind, Source: src, Target: "/data"}}}}
	}
	if _, err := sim.Create(t.Context(), mount(root+"/inside/x")); err == nil || !strings.Contains(err.Error(), "allows no bind mounts") {
		t.Fatalf("bind on a sim without roots: %v; want refused", err)
	}
	sim.SetBindRoots(roots)
	_, err = sim.Create(t.Context(), mount(root+"/shared/escape"))
	want := `mounts[1].source "` + root + `/shared/escape" (target "/data"): refused beneath allowed root "` + root + `": a path component is a symbolic link`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("linked source: %v; want %s", err, want)
	}
	if _, err := sim.Create(t.Context(), mount(root+"/inside/x")); err != nil {
		t.Fatalf("plain source: %v", err)
	}
}
