package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/agentd/agentd/internal/protocol"
	"github.com/agentd/agentd/internal/runtime"
)

// A streak of failures grows a goroutine's backoff; one success ends it, so the first failure
// after the success waits the initial backoff again, not the grown one. These tests drive the
// poller and the exit and health watchers alone, on a clock that moves only when the test
// fires a wait.

// firstWaitMax is the longest a first backoff may be: 250ms, jittered up by half.
const firstWaitMax = 375 * time.Millisecond

// clockWait is one wait the engine asked its clock for; the test ends it by firing it.
type clockWait struct {
	d    time.Duration
	fire chan time.Time
}

// steppedClock hands every wait to the test instead of timing it.
type steppedClock struct {
	mu    sync.Mutex
	now   time.Time
	waits chan clockWait
}

func newSteppedClock() *steppedClock {
	return &steppedClock{now: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC), waits: make(chan clockWait, 1)}
}

func (c *steppedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *steppedClock) After(d time.Duration) <-chan time.Time {
	w := clockWait{d: d, fire: make(chan time.Time, 1)}
	c.waits <- w
	return w.fire
}

func (c *steppedClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// nextWait is the next wait the engine asks for, within a bound.
func (c *steppedClock) nextWait(t *testing.T, what string) clockWait {
	t.Helper()
	select {
	case w := <-c.waits:
		return w
	case <-time.After(10 * time.Second):
		t.Fatalf("no wait asked for %s within 10s", what)
		panic("unreachable")
	}
}

// send hands v to a scripted fake within a bound.
func send[T any](t *testing.T, c chan<- T, v T, what string) {
	t.Helper()
	select {
	case c <- v:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not taken within 10s", what)
	}
}

// runAlone starts one of the engine's goroutines (poller, watchExits, watchHealth) and stops
// it, within a bound, when the test ends.
func runAlone(t *testing.T, e *Engine, g func(context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	e.inbox.wg.Add(1)
	go g(ctx)
	t.Cleanup(func() {
		cancel()
		done := make(chan struct{})
		go func() { e.inbox.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("the goroutine did not stop within 10s of its context's end")
		}
	})
}

// growBackoff fails n times through fail and returns the last wait, fired.
func growBackoff(t *testing.T, clk *steppedClock, n int, fail func()) time.Duration {
	t.Helper()
	var last time.Duration
	for i := 0; i < n; i++ {
		fail()
		w := clk.nextWait(t, "a failure")
		last = w.d
		clk.advance(w.d)
		w.fire <- clk.Now()
	}
	return last
}

// needGrown checks the test's premise: the backoff has grown past the first one.
func needGrown(t *testing.T, grown time.Duration) {
	t.Helper()
	if grown <= firstWaitMax {
		t.Fatalf("the backoff after the failures is %v; the test needs a grown one", grown)
	}
}

// scriptedPolls answers each poll with the error the test sends (nil: an empty answer).
type scriptedPolls struct{ next chan error }

func (cp *scriptedPolls) Poll(ctx context.Context, _ time.Duration) ([]protocol.Payload, error) {
	select {
	case err := <-cp.next:
		return nil, err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
func (cp *scriptedPolls) Ack(context.Context, []string) error { return nil }
func (cp *scriptedPolls) Report(context.Context, []protocol.StateChange) protocol.ReportResult {
	return protocol.ReportResult{}
}

// Fails when the poller keeps its grown backoff after an answered poll (poller.go bo.Reset).
func TestAnsweredPollEndsThePollBackoff(t *testing.T) {
	clk, cp := newSteppedClock(), &scriptedPolls{next: make(chan error)}
	e := New(Config{Seed: 1}, nil, nil, cp, clk, nil, zerolog.Nop())
	runAlone(t, e, e.poller)
	down := errors.New("dial tcp 127.0.0.1:8080: connect: connection refused")
	grown := growBackoff(t, clk, 4, func() { send(t, cp.next, down, "failed poll") })
	needGrown(t, grown)
	send(t, cp.next, nil, "answered poll")
	send(t, cp.next, down, "failed poll after the answer")
	if w := clk.nextWait(t, "the failure after an answer"); w.d > firstWaitMax {
		t.Fatalf("after an answered poll the next failure waits %v (grown: %v); want the initial backoff, at most %v", w.d, grown, firstWaitMax)
	}
}

// stream is one subscription a scripted runtime hands out: its channel, or its error.
type stream[T any] struct {
	ch  chan T
	err error
}

// streams hands out the subscriptions the test sends, one per call.
type streams[T any] chan stream[T]

func (next streams[T]) open(ctx context.Context) (<-chan T, error) {
	select {
	case s := <-next:
		return s.ch, s.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// scriptedExits is a runtime whose exit stream the test opens, fails and ends.
type scriptedExits struct {
	runtime.Runtime // only Exits is called
	next            streams[runtime.Exit]
	cursor          atomic.Int64 // of the last subscription
}

func (rt *scriptedExits) Exits(ctx context.Context, cursor int64) (<-chan runtime.Exit, error) {
	rt.cursor.Store(cursor)
	return rt.next.open(ctx)
}

// scriptedHealth is a runtime whose health stream the test opens, fails and ends.
type scriptedHealth struct {
	runtime.Runtime // only Health is called
	next            streams[runtime.HealthChange]
}

func (hw *scriptedHealth) Health(ctx context.Context) (<-chan runtime.HealthChange, error) {
	return hw.next.open(ctx)
}

// stayedUpEndsTheBackoff grows a stream watcher's backoff with failed subscriptions and
// streams that end at once, then checks that a stream up for 2s ends it.
func stayedUpEndsTheBackoff[T any](t *testing.T, clk *steppedClock, next streams[T]) {
	t.Helper()
	growBackoff(t, clk, 2, func() {
		send(t, next, stream[T]{err: errors.New("Cannot connect to the Docker daemon")}, "failed subscription")
	})
	grown := growBackoff(t, clk, 2, func() { // streams that end at once: the engine is down
		ch := make(chan T)
		close(ch)
		send(t, next, stream[T]{ch: ch}, "stream that ends at once")
	})
	needGrown(t, grown)
	up := make(chan T)
	send(t, next, stream[T]{ch: up}, "stream that stays up")
	clk.advance(2 * time.Second)
	close(up)
	if w := clk.nextWait(t, "the stream's end"); w.d > firstWaitMax {
		t.Fatalf("after a stream up for 2s the resubscription waits %v (grown: %v); want the initial backoff, at most %v", w.d, grown, firstWaitMax)
	}
}

// Fails when the exit watcher keeps its grown backoff after a stream that stayed up (exits.go
// bo.Reset): a stream that worked for over a second ends the streak of failures.
func TestExitStreamThatStayedUpEndsItsBackoff(t *testing.T) {
	clk, rt := newSteppedClock(), &scriptedExits{next: make(streams[runtime.Exit])}
	e := New(Config{Seed: 1}, nil, rt, nil, clk, nil, zerolog.Nop())
	runAlone(t, e, e.watchExits)
	stayedUpEndsTheBackoff(t, clk, rt.next)
}

// Fails when the health watcher keeps its grown backoff after a stream that stayed up
// (exits.go watchHealth's bo.Reset), or waits on another clock than the engine's.
func TestHealthStreamThatStayedUpEndsItsBackoff(t *testing.T) {
	clk, rt := newSteppedClock(), &scriptedHealth{next: make(streams[runtime.HealthChange])}
	e := New(Config{Seed: 1}, nil, rt, nil, clk, nil, zerolog.Nop())
	runAlone(t, e, e.watchHealth)
	stayedUpEndsTheBackoff(t, clk, rt.next)
}

// Fails when the exit watcher resumes after the cursor of the last exit it took, or hands that
// exit in again (exits.go's runtime.ExitMark): a resumed stream gives the exits of the cursor's
// nanosecond again, and of those only another container's — one that exited in the same
// nanosecond — reaches the loop.
func TestResumedExitStreamHandsInTheCursorsNanosecondOnce(t *testing.T) {
	clk, rt := newSteppedClock(), &scriptedExits{next: make(streams[runtime.Exit])}
	e := New(Config{Seed: 1}, nil, rt, nil, clk, nil, zerolog.Nop())
	runAlone(t, e, e.watchExits)
	const at = int64(1_000_000 * time.Second)
	exits := func(xs ...runtime.Exit) stream[runtime.Exit] {
		ch := make(chan runtime.Exit, len(xs))
		for _, x := range xs {
			ch <- x
		}
		close(ch)
		return stream[runtime.Exit]{ch: ch}
	}
	a, b, c := runtime.Exit{ID: "a", Cursor: at}, runtime.Exit{ID: "b", Cursor: at}, runtime.Exit{ID: "c", Cursor: at + 1}
	handedIn := func(want string) {
		t.Helper()
		select {
		case in := <-e.inbox.in:
			if x, ok := in.(ExitInput); !ok || x.Exit.ID != want {
				t.Fatalf("handed in %+v; want the exit of %s", in, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the exit of %s not handed in within 10s", want)
		}
	}
	send(t, rt.next, exits(a), "a stream that gives a's exit and breaks")
	handedIn("a")
	w := clk.nextWait(t, "the stream's end")
	w.fire <- clk.Now()
	send(t, rt.next, exits(a, b, c), "the resumed stream: the cursor's nanosecond again, then later")
	if got := rt.cursor.Load(); got != at {
		t.Fatalf("resubscribed at %d; want a's cursor %d", got, at)
	}
	handedIn("b")
	handedIn("c")
}

// httpStatusErr is a poll answered with an error status.
type httpStatusErr int

func (e httpStatusErr) Error() string   { return fmt.Sprintf("HTTP %d", int(e)) }
func (e httpStatusErr) HTTPStatus() int { return int(e) }

// Fails when the poller's backoff grows past a few seconds while the control plane cannot be
// reached (poller.go unreachablePoll): the poll is how each agent learns of the return and
// places its reports from it, so a wait grown to 30 s made the fleet's drain after an outage
// its slowest poller's. A control plane that answers errors still gets the grown backoff.
func TestUnreachableControlPlaneIsPolledEveryFewSeconds(t *testing.T) {
	clk, cp := newSteppedClock(), &scriptedPolls{next: make(chan error)}
	e := New(Config{Seed: 1}, nil, nil, cp, clk, nil, zerolog.Nop())
	runAlone(t, e, e.poller)
	down := errors.New("dial tcp 127.0.0.1:8080: connect: connection refused")
	for i := 0; i < 10; i++ {
		if w := growBackoff(t, clk, 1, func() { send(t, cp.next, down, "failed poll") }); w > 3*time.Second {
			t.Fatalf("refused poll %d waits %v before the next; want at most 3 s (2 s, jittered)", i+1, w)
		}
	}
	send(t, cp.next, nil, "answered poll")
	if grown := growBackoff(t, clk, 10, func() { send(t, cp.next, error(httpStatusErr(503)), "poll answered 503") }); grown <= 3*time.Second {
		t.Fatalf("after ten polls answered 503 the wait is %v; want the backoff grown past 3 s", grown)
	}
}
