package docker

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/runtime"
)

// TestDockerContainersAreHardened: every container agentd creates has no-new-privileges and the
// default pids limit, as the engine itself reports them.
func TestDockerContainersAreHardened(t *testing.T) {
	e, _ := dockerEngine(t)
	ctx := context.Background()
	if _, err := e.PullImage(ctx, testbox, ""); err != nil {
		t.Fatal(err)
	}
	id, err := e.Create(ctx, runtime.CreateSpec{Task: "task/hardened", Container: event.ContainerSpec{Name: "app", Image: testbox, Command: []string{"run"}}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("docker", "inspect", "-f", "{{json .HostConfig.SecurityOpt}} {{.HostConfig.PidsLimit}}", id).CombinedOutput()
	if err != nil {
		t.Fatalf("docker inspect: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != `["no-new-privileges"] 4096` {
		t.Fatalf("HostConfig: %s; want no-new-privileges and pids limit 4096", got)
	}
}
