package docker

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/runtime"
)

// dockerCreate makes a container with the docker CLI, as an operator or an older agent would,
// and removes it when the test ends.
func dockerCreate(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("docker", append(append([]string{"create"}, args...), testbox, "run")...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker create: %v: %s", err, out)
	}
	id := strings.TrimSpace(string(out))
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", "-v", id).Run() })
	return id
}

// TestDockerNameTakenByAnother: a container name held by a container that is not this one —
// not agentd's, or another agent's — fails the create with ErrNameTaken naming the holder (never
// ErrUnavailable: the engine answered), and the holder is left as it is; the agent's own
// container under the name is the answer of a second create.
func TestDockerNameTakenByAnother(t *testing.T) {
	e, agent := dockerEngine(t)
	ctx := context.Background()
	spec := func(task string) runtime.CreateSpec {
		return runtime.CreateSpec{Task: task, Container: event.ContainerSpec{Name: "app", Image: testbox, Command: []string{"run"}}}
	}
	stranger := dockerCreate(t, "--name", runtime.Name(agent, "task/taken", "app"))
	other := dockerCreate(t, "--name", runtime.Name(agent, "task/taken-by-agent", "app"), "--label", runtime.LabelAgent+"=another-"+agent,
		"--label", runtime.LabelTask+"=task/taken-by-agent", "--label", runtime.LabelContainer+"=app")
	for task, holder := range map[string]string{"task/taken": stranger, "task/taken-by-agent": other} {
		_, err := e.Create(ctx, spec(task))
		if !errors.Is(err, runtime.ErrNameTaken) || errors.Is(err, runtime.ErrUnavailable) || !strings.Contains(err.Error(), holder[:12]) {
			t.Fatalf("create of %s under a name %s holds: %v; want ErrNameTaken naming the holder", task, holder[:12], err)
		}
		if exec.Command("docker", "inspect", holder).Run() != nil {
			t.Fatalf("the holder %s is gone", holder[:12])
		}
	}
	id, err := e.Create(ctx, spec("task/mine"))
	if err != nil {
		t.Fatal(err)
	}
	if again, err := e.Create(ctx, spec("task/mine")); err != nil || again != id {
		t.Fatalf("second create: %s, %v; want the agent's own %s", again, err, id)
	}
}

// TestDockerContainersOfAnOlderAgentAreFound: a container an older agent made under the names
// before (agentd-<task id>-<container>-<fnv32a>) is still the agent's: found by its labels for
// the task and container, and listed — so a restart after an upgrade adopts what runs.
func TestDockerContainersOfAnOlderAgentAreFound(t *testing.T) {
	e, agent := dockerEngine(t)
	ctx := context.Background()
	old := dockerCreate(t, "--name", "agentd-upgraded-"+agent+"-app-5eed0001" /* the names before: agentd-<task id>-<container>-<fnv32a> */, "--label", runtime.LabelAgent+"="+agent,
		"--label", runtime.LabelTask+"=task/upgraded-"+agent, "--label", runtime.LabelContainer+"=app")
	st, err := e.Find(ctx, "task/upgraded-"+agent, "app")
	if err != nil || st.ID != old {
		t.Fatalf("find the container made under the old name: %+v, %v; want %s", st, err, old[:12])
	}
	list, err := e.List(ctx)
	if err != nil || len(list) != 1 || list[0].ID != old || list[0].Task != "task/upgraded-"+agent {
		t.Fatalf("list: %+v, %v; want the old-named container", list, err)
	}
}
