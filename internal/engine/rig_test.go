package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/forensics"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/journal"
	"github.com/agentd/agentd/internal/model"
	"github.com/agentd/agentd/internal/protocol"
	"github.com/agentd/agentd/internal/runtime"
	"github.com/agentd/agentd/internal/simruntime"
)

// fakeClock is a virtual clock: time moves only when the test says.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time { return make(chan time.Time) } // the rig steps time itself

func (c *fakeClock) set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// syncExec queues work; the rig runs it on the test's goroutine, in order.
type syncExec struct{ queue []func() engine.Input }

func (x *syncExec) Go(f func() engine.Input) { x.queue = append(x.queue, f) }

// scriptedCP is a control plane whose answers the test decides. It records every change it
// was sent and every change it accepted.
type scriptedCP struct {
	answer   func(changes []protocol.StateChange) protocol.ReportResult
	sent     []protocol.StateChange
	accepted map[string]int // id → times accepted
}

func (cp *scriptedCP) Poll(context.Context, time.Duration) ([]protocol.Payload, error) {
	return nil, nil
}
func (cp *scriptedCP) Ack(context.Context, []string) error { return nil }
func (cp *scriptedCP) Report(_ context.Context, changes []protocol.StateChange) protocol.ReportResult {
	cp.sent = append(cp.sent, changes...)
	r := cp.answer(changes)
	for _, id := range r.Accepted {
		cp.accepted[id]++
	}
	return r
}

func acceptAll(changes []protocol.StateChange) protocol.ReportResult {
	r := protocol.ReportResult{Outcome: protocol.Settled}
	for _, c := range changes {
		r.Accepted = append(r.Accepted, c.ID)
	}
	return r
}

func throttle(changes []protocol.StateChange) protocol.ReportResult {
	return protocol.ReportResult{Outcome: protocol.Throttled, HTTPStatus: 429, RetryAfter: time.Second}
}

// rig is one agent driven step by step on a virtual clock, in the test's goroutine.
type rig struct {
	t        *testing.T
	dir      string
	clock    *fakeClock
	exec     *syncExec
	cp       *scriptedCP
	cfg      engine.Config
	j        *journal.Journal
	rt       *simruntime.Runtime
	e        *engine.Engine
	mark     runtime.ExitMark // how far settle has handed in the runtime's exits
	msg      int
	diskFull atomic.Bool // makes every journal commit fail, as a full disk would
	// wrap, when set, stands between the engine and the simulated runtime (a call counter).
	wrap func(runtime.Runtime) runtime.Runtime
}

var t0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

func newRig(t *testing.T, wait time.Duration) *rig {
	return newRigIn(t, t.TempDir(), wait)
}

// newRigIn is newRig with its files in dir (fastDir: a test that counts records and bytes
// through many commits, not what a disk makes durable).
func newRigIn(t *testing.T, dir string, wait time.Duration) *rig {
	r := &rig{t: t, dir: dir, clock: &fakeClock{now: t0},
		cp:  &scriptedCP{answer: acceptAll, accepted: map[string]int{}},
		cfg: engine.Config{CleanupWait: wait, Seed: 1, CleanupJitter: 20 * time.Millisecond}}
	r.start()
	t.Cleanup(func() { r.j.Close() })
	return r
}

// start opens the journal and recovers a new engine from it, as a restarted process would.
func (r *rig) start() {
	r.t.Helper()
	r.j = openJournal(r.t, r.dir, &r.diskFull)
	id, err := engine.ResolveAgentID(context.Background(), r.j, "agent-test")
	if err != nil {
		r.t.Fatal(err)
	}
	if r.rt, err = simruntime.Open(r.dir, id, r.clock.Now); err != nil {
		r.t.Fatal(err)
	}
	r.exec = &syncExec{}
	cfg := r.cfg
	cfg.AgentID = id
	var rt runtime.Runtime = r.rt
	if r.wrap != nil {
		rt = r.wrap(rt)
	}
	r.e = engine.New(cfg, r.j, rt, r.cp, r.clock, r.exec, zerolog.Nop())
	if err := r.e.Recover(context.Background()); err != nil {
		r.t.Fatal(err)
	}
	r.mark = runtime.ExitMark{}
}

// crash drops the engine and every in-memory object without a clean shutdown, then starts
// again from the files: the journal and the simulated runtime's.
func (r *rig) crash() {
	r.t.Helper()
	if err := r.j.Close(); err != nil {
		r.t.Fatal(err)
	}
	r.start()
}

// settle runs queued work and feeds the runtime's exits until nothing more happens at this
// instant.
func (r *rig) settle() {
	r.t.Helper()
	ctx := context.Background()
	r.e.Step(ctx, nil)
	for i := 0; i < 10000; i++ {
		if exits, _ := r.rt.ExitsAfter(r.mark); len(exits) > 0 {
			for _, x := range exits {
				r.mark.Take(x)
				r.e.Step(ctx, engine.ExitInput{Exit: x})
			}
			continue
		}
		if len(r.exec.queue) == 0 {
			return
		}
		f := r.exec.queue[0]
		r.exec.queue = r.exec.queue[1:]
		r.e.Step(ctx, f())
	}
	r.t.Fatal("the engine did not settle in 10,000 steps")
}

// advance moves time forward to t, stopping at every wake-up the engine or the runtime asks
// for on the way.
func (r *rig) advance(d time.Duration) {
	r.t.Helper()
	end := r.clock.Now().Add(d)
	for {
		r.settle()
		next := r.e.NextWake()
		if _, exit := r.rt.ExitsAfter(r.mark); !exit.IsZero() && (next.IsZero() || exit.Before(next)) {
			next = exit
		}
		if next.IsZero() || next.After(end) {
			r.clock.set(end)
			r.settle()
			return
		}
		if next.After(r.clock.Now()) {
			r.clock.set(next)
		} else {
			r.clock.set(r.clock.Now().Add(time.Millisecond))
		}
	}
}

// assign delivers a payload with one task, as the poller would.
func (r *rig) assign(arn string, desired string, containers ...protocol.Container) string {
	r.t.Helper()
	id, err := r.deliver(arn, desired, containers...)
	if err != nil {
		r.t.Fatal(err)
	}
	return id
}

// deliver is assign that returns the journal's verdict: the poller acknowledges only on nil.
func (r *rig) deliver(arn string, desired string, containers ...protocol.Container) (string, error) {
	r.msg++
	raw, _ := json.Marshal(protocol.Task{ARN: arn, DesiredStatus: desired, Containers: containers})
	done := make(chan error, 1)
	id := fmt.Sprintf("m-%d", r.msg)
	r.e.Step(context.Background(), engine.PayloadInput{Payload: protocol.Payload{MessageID: id, Tasks: []json.RawMessage{raw}}, Done: done})
	err := <-done
	r.settle()
	return id, err
}

func ctr(name string, cmd ...string) protocol.Container {
	return protocol.Container{Name: name, Image: "web:3", Command: cmd}
}

func (r *rig) task(arn string) *fsm.Task { return r.e.State().Tasks[arn] }

func (r *rig) known(arn string) event.Status {
	if t := r.task(arn); t != nil {
		return t.Known
	}
	if _, ok := r.e.State().Tombstones[arn]; ok {
		return event.StatusCleaned
	}
	return ""
}

// records returns the journal's records of a type for a task.
func (r *rig) records(arn string, typ event.Type) []event.Record {
	var out []event.Record
	_ = r.j.TaskRecords(arn, func(rec event.Record) error {
		if rec.Type() == typ {
			out = append(out, rec)
		}
		return nil
	})
	return out
}

func (r *rig) containers(arn string) int {
	n := 0
	list, _ := r.rt.List(context.Background())
	for _, s := range list {
		if s.Task == arn {
			n++
		}
	}
	return n
}

// verify fails the test unless `agentd journal verify` finds nothing in the rig's journal.
func (r *rig) verify() {
	r.t.Helper()
	rep, err := forensics.Verify(r.j)
	if err != nil {
		r.t.Fatal(err)
	}
	if len(rep.Findings) > 0 {
		r.t.Fatalf("journal verify: %+v", rep.Findings)
	}
	if err := model.Check(r.j); err != nil {
		r.t.Fatal(err)
	}
}

// openJournal opens the journal in dir; while full is set, every commit fails as on a full disk.
func openJournal(t testing.TB, dir string, full *atomic.Bool) *journal.Journal {
	t.Helper()
	j, err := journal.Open(filepath.Join(dir, journal.FileName), journal.Options{BeforeCommit: func() error {
		if full.Load() {
			return errors.New("write journal.db: no space left on device")
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	return j
}
