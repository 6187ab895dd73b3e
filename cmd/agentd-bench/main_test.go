package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// binaries are built once per test run: agentd (the child the agent benches run) and
// agentd-bench itself (the control plane bench's child).
var binaries struct {
	sync.Mutex
	dir   string
	built map[string]string
}

func build(t *testing.T, name, pkg string) string {
	t.Helper()
	binaries.Lock()
	defer binaries.Unlock()
	if bin, ok := binaries.built[name]; ok {
		return bin
	}
	if binaries.dir == "" {
		dir, err := os.MkdirTemp("", "agentd-bench-test-")
		if err != nil {
			t.Fatal(err)
		}
		binaries.dir, binaries.built = dir, map[string]string{}
	}
	bin := filepath.Join(binaries.dir, name)
	if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	binaries.built[name] = bin
	return bin
}

func agentdBinary(t *testing.T) string { return build(t, "agentd", "../agentd") }
func benchBinary(t *testing.T) string  { return build(t, "agentd-bench", ".") }

func TestMain(m *testing.M) {
	code := m.Run()
	if binaries.dir != "" {
		os.RemoveAll(binaries.dir)
	}
	os.Exit(code)
}

// agentImage builds the agent's image under a tag of its own (make image IMAGE=…) and
// removes it when the test ends.
func agentImage(t *testing.T, tag string) string {
	t.Helper()
	image := "agentd:" + tag
	t.Cleanup(func() { _ = exec.Command("docker", "image", "rm", "-f", image).Run() })
	if out, err := exec.Command("make", "-C", "../..", "image", "IMAGE="+image).CombinedOutput(); err != nil {
		t.Fatalf("make image: %v\n%s", err, out)
	}
	return image
}
