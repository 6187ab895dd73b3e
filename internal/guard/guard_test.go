//go:build !plantedbugs

package guard_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/guard"
)

// A build without -tags plantedbugs — every production build — has every guard on, even when
// its environment names them all to be switched off: the test runs itself again with
// AGENTD_PLANTED_BUGS naming every guard, and that process must find each one on.
func TestEveryGuardIsOnInADefaultBuild(t *testing.T) {
	if os.Getenv("GUARD_TEST_CHILD") != "" {
		for _, n := range guard.All {
			if !guard.On(n) {
				t.Fatalf("guard %s is off in a build without -tags plantedbugs", n)
			}
		}
		return
	}
	names := make([]string, len(guard.All))
	for i, n := range guard.All {
		names[i] = string(n)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestEveryGuardIsOnInADefaultBuild$", "-test.v")
	cmd.Env = append(os.Environ(), "GUARD_TEST_CHILD=1", guard.Env+"="+strings.Join(names, ","))
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "PASS") {
		t.Fatalf("with %s naming every guard: %v\n%s", guard.Env, err, out)
	}
}
