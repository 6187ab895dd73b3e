package docker

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/runtime"
)

// Health streams health verdicts: the current one of every running container of this agent
// that has a verdict, then the engine's health_status events. It subscribes before it lists,
// so no change falls between the two.
func (e *Engine) Health(ctx context.Context) (<-chan runtime.HealthChange, error) {
	kind, err := e.knownKind()
	if err != nil {
		return nil, fmt.Errorf("health stream: %w", err)
	}
	if e.probing(kind) {
		return e.probeHealth(ctx) // the engine runs no checks: the agent's own (healthprobe.go)
	}
	f := client.Filters{}.Add("type", "container").Add("event", "health_status").Add("label", runtime.LabelAgent+"="+e.agent)
	ctx, cancel := context.WithCancel(ctx)
	res := e.cli.Events(ctx, client.EventsListOptions{Filters: f})
	list, err := e.List(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	out := make(chan runtime.HealthChange, 64)
	go func() {
		defer cancel()
		defer close(out)
		send := func(h runtime.HealthChange) bool {
			select {
			case out <- h:
				return true
			case <-ctx.Done():
				return false
			}
		}
		now := time.Now().UTC()
		for _, st := range list {
			if !st.Running {
				continue
			}
			if full, err := e.own(ctx, st.ID); err == nil && full.Health != event.HealthUnknown {
				if !send(runtime.HealthChange{ID: st.ID, Task: st.Task, Container: st.Container, Health: full.Health, At: now}) {
					return
				}
			}
		}
		for {
			select {
			case <-ctx.Done():
				return
			case <-res.Err:
				return
			case m, ok := <-res.Messages:
				if !ok {
					return
				}
				// The action is "health_status: healthy" (or unhealthy, starting).
				var h event.Health
				switch strings.TrimSpace(strings.TrimPrefix(string(m.Action), "health_status:")) {
				case "healthy":
					h = event.HealthHealthy
				case "unhealthy":
					h = event.HealthUnhealthy
				default:
					continue
				}
				if !send(runtime.HealthChange{ID: m.Actor.ID, Task: m.Actor.Attributes[runtime.LabelTask], Container: m.Actor.Attributes[runtime.LabelContainer],
					Health: h, At: time.Unix(0, m.TimeNano).UTC()}) {
					return
				}
			}
		}
	}()
	return out, nil
}

// Logs returns the container's json-file log, stdout and stderr multiplexed (stdcopy
// framing, as the engine sends it for a container without a TTY).
func (e *Engine) Logs(ctx context.Context, id string, opts runtime.LogOptions) (io.ReadCloser, error) {
	if _, err := e.own(ctx, id); err != nil {
		return nil, err
	}
	tail := "all"
	if opts.Tail >= 0 {
		tail = strconv.Itoa(opts.Tail)
	}
	rc, err := e.cli.ContainerLogs(ctx, id, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Follow: opts.Follow, Tail: tail})
	if err != nil {
		return nil, e.wrap("logs", id, err)
	}
	return rc, nil
}
