package docker

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/moby/moby/api/types/events"

	"github.com/agentd/agentd/internal/runtime"
)

// The exit stream's order and OOM rules, without an engine: the inspect is scripted.
func TestExitStreamWaitsForTheOOMOfA137(t *testing.T) {
	die := func(id, code string, at int64) events.Message {
		return events.Message{Action: events.ActionDie, TimeNano: at, Actor: events.Actor{ID: id, Attributes: map[string]string{"exitCode": code, runtime.LabelTask: "task/" + id, runtime.LabelContainer: "app"}}}
	}
	oom := func(id string) events.Message {
		return events.Message{Action: events.ActionOOM, Actor: events.Actor{ID: id}}
	}
	steps := []struct {
		name    string
		events  []events.Message
		oomSays map[string]bool // what inspect reads from this step on
		expire  bool            // the head's wait runs out
		want    []runtime.Exit  // sent, in order, after the events (and the expiry)
	}{
		{name: "a plain exit leaves at once", events: []events.Message{die("a", "0", 1)},
			want: []runtime.Exit{{ID: "a", ExitCode: 0}}},
		{name: "die 137 before its oom, inspect not yet OOMKilled: held, then an OOM kill", events: []events.Message{die("b", "137", 2), die("c", "3", 3)},
			want: nil},
		{name: "the oom arrives", events: []events.Message{oom("b")},
			want: []runtime.Exit{{ID: "b", ExitCode: 137, OOMKilled: true}, {ID: "c", ExitCode: 3}}},
		{name: "oom before die: known at once", events: []events.Message{oom("d"), die("d", "137", 4)},
			want: []runtime.Exit{{ID: "d", ExitCode: 137, OOMKilled: true}}},
		{name: "a 137 whose oom never comes: held until the wait ends", events: []events.Message{die("e", "137", 5)},
			want: nil},
		{name: "the wait ends: inspected again, no OOM kill by the engine's word and the kernel unheard: cause unknown", expire: true,
			want: []runtime.Exit{{ID: "e", ExitCode: 137, Reason: runtime.OOMUnknown}}},
		{name: "a 137 the inspect at die already shows OOM-killed", events: []events.Message{die("f", "137", 6)}, oomSays: map[string]bool{"f": true},
			want: []runtime.Exit{{ID: "f", ExitCode: 137, OOMKilled: true}}},
		{name: "another 137 held", events: []events.Message{die("g", "137", 7)},
			want: nil},
		{name: "its wait ends, the repeated inspect shows the OOM kill", expire: true, oomSays: map[string]bool{"g": true},
			want: []runtime.Exit{{ID: "g", ExitCode: 137, OOMKilled: true}}},
		{name: "a 137 of a container without a memory limit leaves at once", events: []events.Message{die("h", "137", 8)},
			want: []runtime.Exit{{ID: "h", ExitCode: 137}}},
		{name: "a 137 whose kernel notification was watched, held", events: []events.Message{die("i", "137", 9)},
			want: nil},
		{name: "its wait ends, no kill heard from the kernel: a kill for another cause", expire: true,
			want: []runtime.Exit{{ID: "i", ExitCode: 137}}},
	}
	inspectSays := map[string]bool{}
	s := exitStream{wait: time.Hour, ooms: map[string]time.Time{}, inspect: func(_ context.Context, id string) (exitState, error) {
		return exitState{oomKilled: inspectSays[id], memoryLimited: id != "h", kernelKnows: id == "i"}, nil
	}}
	ctx := context.Background()
	for _, st := range steps {
		for id, v := range st.oomSays {
			inspectSays[id] = v
		}
		for _, m := range st.events {
			s.event(ctx, m)
		}
		if st.expire {
			s.expire(ctx)
		}
		got := sent(ctx, &s)
		if len(got) != len(st.want) {
			t.Fatalf("%s: sent %+v; want %+v", st.name, got, st.want)
		}
		for i, w := range st.want {
			if g := got[i]; g.ID != w.ID || g.ExitCode != w.ExitCode || g.OOMKilled != w.OOMKilled || g.Reason != w.Reason || g.Task != "task/"+w.ID {
				t.Fatalf("%s: exit %d is %+v; want %+v", st.name, i, g, w)
			}
		}
	}
}

// A subscription with a cursor first sends the exits the engine's event buffer may have lost:
// every container that finished since the cursor (less the slack for a die logged after its
// end), oldest first, through the same OOM rules as a die, and the dies the engine replays of
// those exits are not sent again. The list and the inspect are scripted.
func TestExitStreamCatchesUpFromTheCursor(t *testing.T) {
	const cursor = int64(1_000_000 * time.Second)
	at := func(d time.Duration) time.Time { return time.Unix(0, cursor).Add(d) }
	past := func(id string, finished time.Duration, code int, limited bool) pastExit {
		return pastExit{State: runtime.State{ID: id, Task: "task/" + id, Container: "app", Exited: true, ExitCode: code, FinishedAt: at(finished)}, memoryLimited: limited}
	}
	die := func(id, code string, after time.Duration) events.Message {
		return events.Message{Action: events.ActionDie, TimeNano: at(after).UnixNano(), Actor: events.Actor{ID: id, Attributes: map[string]string{"exitCode": code, runtime.LabelTask: "task/" + id, runtime.LabelContainer: "app"}}}
	}
	listed := []pastExit{
		past("b", 3*time.Second, 0, false),
		past("old", -2*time.Minute, 1, false),    // before the cursor and its slack: reconciled or sent before
		past("slack", -10*time.Second, 0, false), // ended before the cursor, its die may be after it
		past("oom", 2*time.Second, 137, true),    // a 137 under a memory limit: waits for its oom
		past("a", time.Second, 3, false),
	}
	s := exitStream{wait: time.Hour, ooms: map[string]time.Time{},
		replays: func(context.Context, int64) (bool, error) { return false, nil },
		exited:  func(context.Context) ([]pastExit, error) { return listed, nil },
		inspect: func(context.Context, string) (exitState, error) { return exitState{}, nil }}
	ctx := context.Background()
	if err := s.start(ctx, cursor); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name   string
		events []events.Message
		want   []string // ids sent, in order, after the events
	}{
		{name: "the catch-up: oldest first, up to the held 137", want: []string{"slack", "a"}},
		{name: "the engine replays a's die, then c dies", events: []events.Message{die("a", "3", time.Second+5*time.Millisecond), die("c", "0", 5*time.Second)}},
		{name: "the oom of the held 137 comes", events: []events.Message{{Action: events.ActionOOM, Actor: events.Actor{ID: "oom"}}},
			want: []string{"oom", "b", "c"}},
		{name: "the replayed dies of the caught exits", events: []events.Message{die("slack", "0", time.Millisecond), die("oom", "137", 2*time.Second), die("b", "0", 3*time.Second)}},
		{name: "b runs again and dies: a new exit", events: []events.Message{die("b", "2", 9*time.Second)}, want: []string{"b"}},
	}
	for _, st := range steps {
		for _, m := range st.events {
			s.event(ctx, m)
		}
		got := sent(ctx, &s)
		var ids []string
		for _, x := range got {
			ids = append(ids, x.ID)
			if x.ID == "oom" && (!x.OOMKilled || x.ExitCode != 137) || x.ID == "a" && x.ExitCode != 3 || x.Task != "task/"+x.ID {
				t.Fatalf("%s: sent %+v", st.name, x)
			}
			if x.ID != "c" && x.ID != "b" && x.Cursor != cursor {
				t.Fatalf("%s: the caught exit %s carries cursor %d; want the subscription's %d", st.name, x.ID, x.Cursor, cursor)
			}
		}
		if !slices.Equal(ids, st.want) {
			t.Fatalf("%s: sent %v; want %v", st.name, ids, st.want)
		}
	}
}

// The catch-up lists only when the subscription has a cursor and the engine's buffer no longer
// reaches back to it; a failure of either call fails the subscription, which the caller makes
// again.
func TestExitStreamCatchesUpOnlyWhenTheReplayMayMissDies(t *testing.T) {
	for _, tc := range []struct {
		name             string
		cursor           int64
		reaches          bool  // the buffer still holds a die at or before the cursor
		readErr, listErr error // the calls fail
		listed           bool
		err              error
	}{
		{name: "a first subscription: reconciliation stands for the past", cursor: 0},
		{name: "the buffer reaches back to the cursor", cursor: 1, reaches: true},
		{name: "the buffer does not", cursor: 1, listed: true},
		{name: "the buffer cannot be read", cursor: 1, readErr: runtime.ErrUnavailable, err: runtime.ErrUnavailable},
		{name: "the list fails", cursor: 1, listErr: runtime.ErrUnavailable, listed: true, err: runtime.ErrUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			listed := false
			s := exitStream{
				replays: func(context.Context, int64) (bool, error) {
					if tc.cursor <= 0 {
						t.Fatal("a subscription without a cursor read the buffer")
					}
					return tc.reaches, tc.readErr
				},
				exited: func(context.Context) ([]pastExit, error) {
					listed = true
					return []pastExit{{State: runtime.State{ID: "a", Exited: true, FinishedAt: time.Unix(0, tc.cursor)}}}, tc.listErr
				},
			}
			err := s.start(context.Background(), tc.cursor)
			if !errors.Is(err, tc.err) || listed != tc.listed {
				t.Fatalf("start: %v, listed %v; want %v, listed %v", err, listed, tc.err, tc.listed)
			}
			if queued := len(s.queue) > 0; queued != (tc.listed && tc.err == nil) {
				t.Fatalf("queued %d exits", len(s.queue))
			}
		})
	}
}

// A subscription gives the dies at its cursor's nanosecond, not only those after it: the reader
// resumes at the cursor of the last exit it took, and a second container may have died in that
// same nanosecond (the reader drops the exits it took already: ExitMark). Dies before the
// cursor are not the subscription's.
func TestExitStreamGivesTheDiesAtItsCursor(t *testing.T) {
	const cursor = int64(1_000_000 * time.Second)
	die := func(id string, at int64) events.Message {
		return events.Message{Action: events.ActionDie, TimeNano: at, Actor: events.Actor{ID: id, Attributes: map[string]string{"exitCode": "0", runtime.LabelTask: "task/" + id, runtime.LabelContainer: "app"}}}
	}
	s := exitStream{from: cursor, wait: time.Hour, ooms: map[string]time.Time{}}
	ctx := context.Background()
	for _, m := range []events.Message{die("before", cursor-1), die("taken", cursor), die("same-nanosecond", cursor), die("after", cursor+1)} {
		s.event(ctx, m)
	}
	var ids []string
	for _, x := range sent(ctx, &s) {
		ids = append(ids, x.ID)
	}
	if want := []string{"taken", "same-nanosecond", "after"}; !slices.Equal(ids, want) {
		t.Fatalf("a subscription from the cursor sent %v; want %v", ids, want)
	}
}

// sent flushes what the stream may send now.
func sent(ctx context.Context, s *exitStream) []runtime.Exit {
	out := make(chan runtime.Exit, 64)
	s.flush(ctx, out)
	close(out)
	var got []runtime.Exit
	for x := range out {
		got = append(got, x)
	}
	return got
}
