package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The daemon every host runs links no laboratory: no benchmark (cmd/agentd-bench has them), no
// test server or test rig. A package here that imports one fails this test.
func TestTheDaemonLinksNoLab(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		switch {
		case dep == "net/http/httptest", strings.HasSuffix(dep, "/internal/benchmark"),
			strings.HasSuffix(dep, "/internal/registrytest"), strings.HasSuffix(dep, "/internal/runtimetest"):
			t.Errorf("cmd/agentd links %s", dep)
		}
	}
}
