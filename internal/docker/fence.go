package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/agentd/agentd/internal/runtime"
)

// RemoveUnlessStarted is the fence against a late start: one that has started (running, or
// run and exited: its start time is set) is left, ErrRunning; else a remove that is not
// forced, so the engine itself refuses one that runs (Docker answers 409, Podman "container
// state improper": ErrRunning) — after which no start asked earlier can land on it. Gone is
// ErrNotFound. What Remove keeps of a removed container (its bind volumes' descriptors) goes
// with it. A start that lands and ends between the inspect and the remove is not refused by
// the remove: the engine's events tell it (removeUnstarted).
func (e *Engine) RemoveUnlessStarted(ctx context.Context, id string) error {
	since := time.Now().Add(-time.Second).UnixNano() // a second's margin for the engine's clock
	if _, st, err := e.inspect(ctx, id); err != nil {
		return err // not ours, or gone: ErrNotFound
	} else if st.Running || st.Exited || !st.StartedAt.IsZero() {
		return fmt.Errorf("remove %s: %w", id, runtime.ErrRunning)
	}
	return e.removeUnstarted(ctx, id, since)
}

// removeUnstarted removes a container the fence's inspect (after since) showed never started,
// unless it runs; then asks the engine's events whether a start of it landed since. One did:
// the container ran, and is gone now — ErrNotFound, so the agent records it vanished, never
// makes it again to run a second time. The events not read: the same, it may have run.
func (e *Engine) removeUnstarted(ctx context.Context, id string, since int64) error {
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
	if err := e.Remove(ctx, id); err != nil { // gone now: the forced remove finds nothing, and releases its bind volumes
		return err
	}
	if started, err := e.startedSince(ctx, id, since); err != nil || started {
		return fmt.Errorf("remove %s: a start may have landed as it was fenced, and it ran before the remove (%v): %w", id, err, runtime.ErrNotFound)
	}
	return nil
}

// startedSince says whether the engine logged a start of container id since a time (Unix
// nanoseconds). Podman replays nothing up to an end already past, so the end is a second
// ahead there, as the image claims' catch-up reads.
func (e *Engine) startedSince(ctx context.Context, id string, since int64) (bool, error) {
	until := time.Now()
	if kind, _ := e.knownKind(); kind != kindDocker {
		until = until.Add(podmanAhead)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	f := client.Filters{}.Add("type", "container").Add("event", "start").Add("container", id)
	res := e.cli.Events(rctx, client.EventsListOptions{Since: stamp(since), Until: stamp(until.UnixNano()), Filters: f})
	for {
		select {
		case err := <-res.Err:
			if err == nil || errors.Is(err, io.EOF) {
				return false, nil
			}
			return false, e.wrap("read", "the engine's start events of "+id, err)
		case <-res.Messages:
			return true, nil
		}
	}
}
