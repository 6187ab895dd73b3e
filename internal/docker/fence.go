package docker

import (
	"context"
	"fmt"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/agentd/agentd/internal/runtime"
)

// RemoveUnlessStarted is the fence against a late start: one that has started (running, or
// run and exited: its start time is set) is left, ErrRunning; else a remove that is not
// forced, so the engine itself decides, in one step, between a container that runs (Docker
// answers 409, Podman "container state improper": ErrRunning) and one it deletes — after
// which no start asked earlier can land on it. Gone is ErrNotFound. What Remove keeps of a
// removed container (its bind volumes' descriptors) goes with it. Its limit: a start that
// lands and ends between the inspect and the remove goes unseen (docs/design.md).
func (e *Engine) RemoveUnlessStarted(ctx context.Context, id string) error {
	if _, st, err := e.inspect(ctx, id); err != nil {
		return err // not ours, or gone: ErrNotFound
	} else if st.Running || st.Exited || !st.StartedAt.IsZero() {
		return fmt.Errorf("remove %s: %w", id, runtime.ErrRunning)
	}
	_, err := e.cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{RemoveVolumes: true})
	if err != nil && (cerrdefs.IsConflict(err) || strings.Contains(err.Error(), "container state improper")) {
		// Refused: started since the inspect, or another removal of it is under way.
		if _, st, ierr := e.inspect(ctx, id); ierr == nil && st.Running {
			return fmt.Errorf("remove %s: %w", id, runtime.ErrRunning)
		}
	}
	if err != nil {
		return e.wrap("remove", id, err)
	}
	return e.Remove(ctx, id) // gone now: the forced remove finds nothing, and releases its bind volumes
}
