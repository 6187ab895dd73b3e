package docker

import (
	"os"
	"path/filepath"
	"testing"
)

// The OOM watch finds a process's memory cgroup (v1) from /proc/PID/cgroup beneath the memory
// hierarchy, whatever the other controllers' lines say, and nothing where there is none.
func TestTheMemoryCgroupOfAProcessIsFound(t *testing.T) {
	proc, root := t.TempDir(), t.TempDir()
	write := func(path, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(proc, "7", "cgroup"), "9:name=systemd:/\n4:memory:/libpod_parent/libpod-abc\n3:cpu,cpuacct:/libpod_parent/libpod-abc\n")
	write(filepath.Join(root, "libpod_parent", "libpod-abc", "memory.oom_control"), "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n")
	write(filepath.Join(proc, "8", "cgroup"), "0::/system.slice/x.scope\n") // cgroup v2 only
	write(filepath.Join(proc, "9", "cgroup"), "4:memory:/gone\n")           // removed already
	if dir, err := memoryCgroupV1(proc, root, 7); err != nil || dir != filepath.Join(root, "libpod_parent", "libpod-abc") {
		t.Fatalf("pid 7: %q, %v; want its libpod cgroup", dir, err)
	}
	for _, pid := range []int{8, 9, 10} {
		if dir, err := memoryCgroupV1(proc, root, pid); err == nil {
			t.Errorf("pid %d: %q; want no memory cgroup", pid, dir)
		}
	}
}
