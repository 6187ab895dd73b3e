package docker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/runtime"
)

// On the real engine: a late start that lands between the fence's inspect and its remove,
// and runs to its exit there, is not refused by the remove (an exited container is removed
// without force). The fence must still not pass it for a container that never ran — the agent
// would make it again and run it a second time — so it reads the engine's start events, and
// calls it gone (ErrNotFound: recorded vanished, never made again). One never started is
// removed, nil.
func TestDockerAFenceSeesAStartThatLandedBeforeItsRemove(t *testing.T) {
	e, _ := dockerEngine(t)
	ctx := context.Background()
	if _, err := e.PullImage(ctx, testbox, ""); err != nil {
		t.Fatal(err)
	}
	create := func(task string) string {
		id, err := e.Create(ctx, runtime.CreateSpec{Task: task, Container: event.ContainerSpec{Name: "app", Image: testbox, Command: []string{"exit", "0"}}})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	quiet := create("task/quiet")
	if err := e.removeUnstarted(ctx, quiet, time.Now().Add(-time.Second).UnixNano()); err != nil {
		t.Fatalf("fence of a container never started: %v; want it removed", err)
	}
	landed := create("task/landed")
	since := time.Now().Add(-time.Second).UnixNano() // the fence's inspect: it showed never started
	// The dead agent's start lands now, past the engine's own guard, and the container exits.
	if _, err := e.cli.ContainerStart(ctx, landed, client.ContainerStartOptions{}); err != nil {
		t.Fatal(err)
	}
	waitExit(t, e, landed)
	err := e.removeUnstarted(ctx, landed, since)
	if !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("fence of a container a start ran since its inspect: %v; want ErrNotFound (it ran: never made again)", err)
	}
	if _, err := e.Inspect(ctx, landed); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("after the fence: %v; want the container gone", err)
	}
}
