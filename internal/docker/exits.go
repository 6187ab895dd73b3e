package docker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/client"

	"github.com/agentd/agentd/internal/runtime"
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

// catchUpSlack is how far before the cursor the catch-up looks. A container's FinishedAt is
// when its process ended; its die comes after the engine has deleted the task and drained its
// output (up to 30 s and 2 s in moby 20.10's handleContainerExit), so a die just after the
// cursor can belong to an exit finished well before it.
const catchUpSlack = time.Minute

// Exits streams the engine's "die" events of this agent's containers at or after cursor (the
// event's time in nanoseconds), each with whether the kernel killed the container for going
// over its memory limit. It follows the "oom" events too: a die with code 137 that neither the
// inspect nor an oom event has shown to be an OOM kill is held for at most oomWait for its
// oom, then the inspect is repeated. Exits leave in the order of their dies, so the cursor the
// caller journals only ever grows, and a held exit holds back the ones behind it.
//
// The stream ends on any error; the caller resubscribes from the last cursor it saw. The
// engine replays the dies from the cursor on from its buffer of its last 256 events (moby
// daemon/events eventsLimit), which a busy host overruns while the stream is down, so a
// subscription with a cursor first catches up (exitStream.start): every container of this
// agent that exited since the cursor is sent as an exit before the stream's own, and its
// die, if the engine replays it, is not sent again. Across subscriptions an exit may come
// twice; the core records an exit only for a container it holds RUNNING. While the buffer
// still reaches back past the cursor, its replay misses nothing and the catch-up is skipped: a
// stream resumed at an exit's cursor gives again only the dies of that nanosecond, which the
// reader drops as taken (runtime.ExitMark) — one of them may be another container's.
//
// While the engine is not named (identify.go) no subscription is made: the agent's exit
// stream is its standing link to the engine, so an unnamed engine makes it unhealthy even
// with no task running. A stream the engine broke has the engine named again.
func (e *Engine) Exits(ctx context.Context, cursor int64) (<-chan runtime.Exit, error) {
	if _, err := e.knownKind(); err != nil {
		return nil, fmt.Errorf("exit stream: %w", err)
	}
	f := client.Filters{}.Add("type", "container").Add("event", dieEvents...).Add("event", "oom").Add("label", runtime.LabelAgent+"="+e.agent)
	opts := client.EventsListOptions{Filters: f}
	if cursor > 0 {
		opts.Since = stamp(cursor)
	}
	ctx, cancel := context.WithCancel(ctx)
	// Subscribed once Events returns (the engine has answered): an exit after the catch-up's
	// list is in the stream.
	res := e.cli.Events(ctx, opts)
	s := exitStream{from: cursor, inspect: e.exitState, replays: e.replaysFrom, exited: e.pastExits, wait: oomWait, ooms: map[string]time.Time{}}
	if err := s.start(ctx, cursor); err != nil {
		cancel()
		return nil, err
	}
	out := make(chan runtime.Exit, 64)
	go func() {
		defer cancel()
		defer close(out)
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
			case err := <-res.Err:
				if ctx.Err() == nil {
					e.lost(fmt.Errorf("the event stream broke: %w", err))
				}
				return
			case <-wake:
				s.expire(ctx)
			case m, ok := <-res.Messages:
				if !ok {
					return
				}
				s.event(ctx, m)
			}
		}
	}()
	return out, nil
}

// dieEvents are the names a container's end is filtered by: Docker's "die", and Podman's
// "died", which its Docker API filters by though it sends the event as "die". Each engine
// matches nothing by the other's name, so asking for both is safe on either.
var dieEvents = []string{"die", "died"}

// exitStream orders and completes the exits of one subscription.
type exitStream struct {
	from    int64 // the subscription's cursor: what came before it is not this subscription's
	inspect func(ctx context.Context, id string) (exitState, error)
	// replays says whether the engine's replay from cursor misses no die; exited lists this
	// agent's exited containers, for the catch-up when it may.
	replays func(ctx context.Context, cursor int64) (bool, error)
	exited  func(ctx context.Context) ([]pastExit, error)
	wait    time.Duration        // oomWait
	queue   []heldExit           // in die order; the head leaves once it is known
	ooms    map[string]time.Time // containers whose oom came with no die waiting for it: when
	// caught holds the containers whose exit the catch-up sent, with when each finished, until
	// the die of that exit comes: it is not sent again.
	caught map[string]int64
}

// heldExit is an exit not yet sent: known (it may go), or waiting for its oom until until.
type heldExit struct {
	x     runtime.Exit
	known bool
	until time.Time
}

// pastExit is a container the catch-up found exited, with what the exit stream asks of it.
type pastExit struct {
	runtime.State
	memoryLimited, kernelKnows bool
}

// start catches up on a subscription with a cursor whose replay may miss dies: every
// container that finished at or after the cursor (less catchUpSlack) is queued as an exit,
// oldest first, before any event. Such an exit carries the subscription's cursor, not its own
// time: resuming after it must catch up again, since the dies before it may not be sent yet.
func (s *exitStream) start(ctx context.Context, cursor int64) error {
	if cursor <= 0 {
		return nil // a first subscription: reconciliation stands for the past
	}
	whole, err := s.replays(ctx, cursor)
	if err != nil || whole {
		return err
	}
	since := time.Unix(0, cursor).Add(-catchUpSlack)
	past, err := s.exited(ctx)
	if err != nil {
		return fmt.Errorf("exit stream: catching up on the exits since %s: %w", since.UTC().Format(time.RFC3339Nano), err)
	}
	past = slices.DeleteFunc(past, func(p pastExit) bool { return p.FinishedAt.Before(since) })
	slices.SortFunc(past, func(a, b pastExit) int {
		return cmp.Or(a.FinishedAt.Compare(b.FinishedAt), strings.Compare(a.ID, b.ID))
	})
	s.caught = make(map[string]int64, len(past))
	for _, p := range past {
		s.caught[p.ID] = p.FinishedAt.UnixNano()
		x := runtime.Exit{ID: p.ID, Task: p.Task, Container: p.Container, ExitCode: p.ExitCode, At: p.FinishedAt.UTC(), Cursor: cursor}
		s.queueExit(x, exitState{oomKilled: p.OOMKilled, memoryLimited: p.memoryLimited, kernelKnows: p.kernelKnows})
	}
	return nil
}

// event takes one die or oom message. One before the subscription's cursor is dropped; one at
// it is kept (Runtime.Exits): a second container may have died in the same nanosecond as the
// last exit the reader took.
func (s *exitStream) event(ctx context.Context, m events.Message) {
	if m.TimeNano < s.from {
		return
	}
	id := m.Actor.ID
	if m.Action == events.ActionOOM {
		for i := range s.queue {
			if s.queue[i].x.ID == id && !s.queue[i].known {
				s.queue[i].x.OOMKilled, s.queue[i].known = true, true
				return
			}
		}
		if _, ok := s.caught[id]; ok {
			return // the catch-up's inspect settled that exit; its die is no OOM kill to come
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
	if finished, ok := s.caught[id]; ok && m.TimeNano >= finished {
		delete(s.caught, id) // the die of an exit the catch-up queued: sent once
		return
	}
	code, _ := strconv.Atoi(m.Actor.Attributes["exitCode"])
	x := runtime.Exit{ID: id, Task: m.Actor.Attributes[runtime.LabelTask], Container: m.Actor.Attributes[runtime.LabelContainer],
		ExitCode: code, At: time.Unix(0, m.TimeNano).UTC(), Cursor: m.TimeNano}
	if _, ok := s.ooms[id]; ok {
		delete(s.ooms, id)
		x.OOMKilled = true
	}
	var st exitState
	if code != 0 && !x.OOMKilled {
		// The die event does not say why; the kernel's OOM kill shows in the state — when
		// Docker has heard of it by now. (Not answered: as if no kill and no limit.)
		st, _ = s.inspect(ctx, id)
	}
	s.queueExit(x, st)
}

// queueExit queues x behind the exits before it, known at once unless it is a 137 that
// neither an oom nor the inspect (st) has shown to be an OOM kill, of a container under a
// memory limit: that one waits for its oom until the wait runs out (expire).
func (s *exitStream) queueExit(x runtime.Exit, st exitState) {
	x.OOMKilled = x.OOMKilled || st.oomKilled
	s.queue = append(s.queue, heldExit{x: x, known: x.ExitCode != 137 || x.OOMKilled || !st.memoryLimited, until: time.Now().Add(s.wait)})
	if s.queue[len(s.queue)-1].known {
		s.name(&s.queue[len(s.queue)-1].x, st)
	}
}

// name words the cause of a known exit where no one could tell it: a 137 under a memory limit
// that is no OOM kill by the engine's word, with the kernel's unheard.
func (s *exitStream) name(x *runtime.Exit, st exitState) {
	if x.ExitCode == 137 && !x.OOMKilled && st.memoryLimited && !st.kernelKnows {
		x.Reason = runtime.OOMUnknown
	}
}

// expire settles the held head whose oom did not come in time by asking the engine again.
func (s *exitStream) expire(ctx context.Context) {
	h := &s.queue[0]
	if st, err := s.inspect(ctx, h.x.ID); err == nil {
		h.x.OOMKilled = st.oomKilled
		s.name(&h.x, st)
	} else {
		s.name(&h.x, exitState{memoryLimited: true})
	}
	h.known = true
}

// flush sends the known exits at the head of the queue; false when ctx ended.
func (s *exitStream) flush(ctx context.Context, out chan<- runtime.Exit) bool {
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
	oomKilled     bool // Docker has recorded the kernel's OOM kill (or the kernel told the agent)
	memoryLimited bool // it runs under a memory limit: an OOM kill of its own is possible
	kernelKnows   bool // the kernel's OOM notification was watched: no kill heard is none
}

func (e *Engine) exitState(ctx context.Context, id string) (exitState, error) {
	c, st, err := e.inspect(ctx, id)
	if err != nil {
		return exitState{}, err
	}
	return exitState{oomKilled: st.OOMKilled, memoryLimited: memoryLimited(c), kernelKnows: e.oom.knows(id)}, nil
}

func memoryLimited(c container.InspectResponse) bool {
	return c.HostConfig != nil && c.HostConfig.Memory > 0
}

// replaysFrom says whether the engine's event buffer still holds a die of this agent before
// cursor. The buffer keeps the engine's latest events (of every kind, any agent's), so then it
// holds every die at or after cursor too, and a subscription made before this call replays
// them all. A die at the cursor's nanosecond is not enough: another die of that nanosecond may
// have been logged before it and pushed out. No such die (pushed out, or the engine restarted
// since) says it may not; so does
// no answer within a few seconds (a cursor ahead of the engine's clock makes it wait for
// dies to come), and so does Podman, which replays nothing up to an end in the past.
func (e *Engine) replaysFrom(ctx context.Context, cursor int64) (bool, error) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	f := client.Filters{}.Add("type", "container").Add("event", dieEvents...).Add("label", runtime.LabelAgent+"="+e.agent)
	res := e.cli.Events(rctx, client.EventsListOptions{Until: stamp(cursor), Filters: f})
	select {
	case m := <-res.Messages:
		return m.TimeNano < cursor, nil
	case err := <-res.Err:
		if errors.Is(err, io.EOF) || ctx.Err() == nil && rctx.Err() != nil {
			return false, nil // the buffer ends (or does not) with nothing before cursor
		}
		return false, e.wrap("read", "the engine's buffered events", err)
	}
}

// stamp is a time in nanoseconds as the events API takes it.
func stamp(ns int64) string { return fmt.Sprintf("%d.%09d", ns/1e9, ns%1e9) }

// pastExits is every container of this agent that has run and stopped, inspected (the list
// gives no exit code nor end time). The list is not filtered by status: Podman refuses the
// status "dead" (a 500), which Docker's exited containers may have; phase picks them out.
func (e *Engine) pastExits(ctx context.Context) ([]pastExit, error) {
	f := client.Filters{}.Add("label", runtime.LabelAgent+"="+e.agent)
	res, err := e.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return nil, e.wrap("list", "exited containers", err)
	}
	out := make([]pastExit, 0, len(res.Items))
	for _, item := range res.Items {
		if _, exited := phase(item.State); !exited {
			continue
		}
		c, st, err := e.inspect(ctx, item.ID)
		if errors.Is(err, runtime.ErrNotFound) {
			continue // removed since the list
		} else if err != nil {
			return nil, err
		}
		if st.Exited {
			out = append(out, pastExit{State: st, memoryLimited: memoryLimited(c), kernelKnows: e.oom.knows(item.ID)})
		}
	}
	return out, nil
}
