package docker

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/client"
)

// oomWait bounds how long an exit with code 137 and no OOM kill on record waits for its
// container's "oom" event. Docker can emit a container's "die" before its "oom" (seen on this
// project's engine: the oom 130 ms after the die, one run in three), and an inspect at the die
// then reads OOMKilled false: without the wait, a kill for going over the memory limit would be
// reported as a plain exit 137 instead of with a reason starting OutOfMemory (PROTOCOL.md §4).
// Only a container with a memory limit waits: a SIGKILL of another cause (a stop's timeout,
// docker kill) of such a container waits this long and no more.
const oomWait = 2 * time.Second

// oomMemory is how long an oom event is remembered for a die still to come.
const oomMemory = time.Minute

// Exits streams the engine's "die" events of this agent's containers after cursor (the
// event's time in nanoseconds), each with whether the kernel killed the container for going
// over its memory limit. It follows the "oom" events too: a die with code 137 that neither the
// inspect nor an oom event has shown to be an OOM kill is held for at most oomWait for its
// oom, then the inspect is repeated. Exits leave in the order of their dies, so the cursor the
// caller journals only ever grows, and a held exit holds back the ones behind it.
//
// The stream ends on any error; the caller resubscribes from the last cursor it saw, so no
// exit is missed across a reconnect — a held exit was not seen, and comes again (the engine
// keeps its last 256 events; reconciliation after a restart covers longer gaps).
func (e *Engine) Exits(ctx context.Context, cursor int64) (<-chan Exit, error) {
	f := client.Filters{}.Add("type", "container").Add("event", "die", "oom").Add("label", LabelAgent+"="+e.agent)
	opts := client.EventsListOptions{Filters: f}
	if cursor > 0 {
		opts.Since = fmt.Sprintf("%d.%09d", cursor/1e9, cursor%1e9)
	}
	res := e.cli.Events(ctx, opts)
	out := make(chan Exit, 64)
	go func() {
		defer close(out)
		s := exitStream{inspect: e.exitState, wait: oomWait, ooms: map[string]time.Time{}}
		for {
			if !s.flush(ctx, out) {
				return
			}
			var wake <-chan time.Time
			if len(s.queue) > 0 {
				wake = time.After(time.Until(s.queue[0].until))
			}
			select {
			case <-ctx.Done():
				return
			case <-res.Err:
				return
			case <-wake:
				s.expire(ctx)
			case m, ok := <-res.Messages:
				if !ok {
					return
				}
				if m.TimeNano > cursor {
					s.event(ctx, m)
				}
			}
		}
	}()
	return out, nil
}

// exitStream orders and completes the exits of one subscription.
type exitStream struct {
	inspect func(ctx context.Context, id string) (exitState, error)
	wait    time.Duration        // oomWait
	queue   []heldExit           // in die order; the head leaves once it is known
	ooms    map[string]time.Time // containers whose oom came with no die waiting for it: when
}

// heldExit is an exit not yet sent: known (it may go), or waiting for its oom until until.
type heldExit struct {
	x     Exit
	known bool
	until time.Time
}

// event takes one die or oom message.
func (s *exitStream) event(ctx context.Context, m events.Message) {
	id := m.Actor.ID
	if m.Action == events.ActionOOM {
		for i := range s.queue {
			if s.queue[i].x.ID == id && !s.queue[i].known {
				s.queue[i].x.OOMKilled, s.queue[i].known = true, true
				return
			}
		}
		now := time.Now()
		for k, at := range s.ooms {
			if now.Sub(at) > oomMemory {
				delete(s.ooms, k)
			}
		}
		s.ooms[id] = now // the oom came first: the die to come is an OOM kill
		return
	}
	code, _ := strconv.Atoi(m.Actor.Attributes["exitCode"])
	x := Exit{ID: id, Task: m.Actor.Attributes[LabelTask], Container: m.Actor.Attributes[LabelContainer],
		ExitCode: code, At: time.Unix(0, m.TimeNano).UTC(), Cursor: m.TimeNano}
	if _, ok := s.ooms[id]; ok {
		delete(s.ooms, id)
		x.OOMKilled = true
	}
	limited := false
	if code != 0 && !x.OOMKilled {
		// The die event does not say why; the kernel's OOM kill shows in the state — when
		// Docker has heard of it by now.
		if st, err := s.inspect(ctx, id); err == nil {
			x.OOMKilled, limited = st.oomKilled, st.memoryLimited
		}
	}
	s.queue = append(s.queue, heldExit{x: x, known: code != 137 || x.OOMKilled || !limited, until: time.Now().Add(s.wait)})
}

// expire settles the held head whose oom did not come in time by asking the engine again.
func (s *exitStream) expire(ctx context.Context) {
	h := &s.queue[0]
	if st, err := s.inspect(ctx, h.x.ID); err == nil {
		h.x.OOMKilled = st.oomKilled
	}
	h.known = true
}

// flush sends the known exits at the head of the queue; false when ctx ended.
func (s *exitStream) flush(ctx context.Context, out chan<- Exit) bool {
	for len(s.queue) > 0 && s.queue[0].known {
		select {
		case out <- s.queue[0].x:
			s.queue = s.queue[1:]
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// exitState is what the exit stream asks of an exited container.
type exitState struct {
	oomKilled     bool // Docker has recorded the kernel's OOM kill
	memoryLimited bool // it runs under a memory limit: an OOM kill of its own is possible
}

func (e *Engine) exitState(ctx context.Context, id string) (exitState, error) {
	c, st, err := e.inspect(ctx, id)
	if err != nil {
		return exitState{}, err
	}
	return exitState{oomKilled: st.OOMKilled, memoryLimited: c.HostConfig != nil && c.HostConfig.Memory > 0}, nil
}
