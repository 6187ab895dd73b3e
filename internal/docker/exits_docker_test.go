package docker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/runtime"
)

// Docker replays to a resubscription only its last 256 events (moby daemon/events
// eventsLimit). A container that exits while the exit stream is down and the host churns has
// its die pushed out of them: the resubscription from the last cursor must still send its exit
// (the catch-up), once, and once only the exit of a container whose die Docker does replay.
// (While the buffer reaches back past the cursor there is no catch-up:
// TestDockerBufferReachesBackToTheLastDie.) The resubscription is the agent's restarted
// process, from the cursor it journaled. On Podman, which keeps its events in a file and
// replays nothing up to an end already past, every resubscription catches up and its replay
// sends every die again: the same exits are sent, each once, with no churn.
func TestDockerExitLostFromTheEventBufferIsCaughtUp(t *testing.T) {
	e, agent := dockerEngine(t)
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second) // a bound on a hang, not a speed: 60 containers made and removed take 80 s at load 20
	defer cancel()

	// A first subscription sees an exit: its cursor is what the agent journals. Then the
	// stream breaks.
	sub, unsubscribe := context.WithCancel(ctx)
	exits, err := e.Exits(sub, time.Now().Add(-time.Second).UnixNano())
	if err != nil {
		t.Fatal(err)
	}
	cursor := exitEvent(ctx, t, exits, startSpec(t, e, "task/first", exitSpec(0))).Cursor
	unsubscribe()

	lost := startSpec(t, e, "task/lost", exitSpec(3))
	waitStopped(ctx, t, e, lost)
	if !onPodman(e) {
		churn(ctx, t, 60) // about 360 events of another agent's throwaway containers
	}
	replayed := startSpec(t, e, "task/replayed", exitSpec(4))
	waitStopped(ctx, t, e, replayed)
	if !onPodman(e) {
		if dies := bufferedDies(ctx, t, e, cursor); dies[lost] || !dies[replayed] {
			t.Fatalf("Docker's buffer replays the die of lost: %v, of replayed: %v; the churn was meant to push out the first only", dies[lost], dies[replayed])
		}
	}

	e = agentEngine(t, agent, PullConfig{}) // the agent restarted
	exits, err = e.Exits(ctx, cursor)
	if err != nil {
		t.Fatal(err)
	}
	last := startSpec(t, e, "task/last", exitSpec(5))
	seen := map[string]runtime.Exit{}
	for x := range exits {
		if _, twice := seen[x.ID]; twice {
			t.Fatalf("the exit of %s sent twice in one subscription: %+v", x.ID, x)
		}
		seen[x.ID] = x
		if x.ID == last {
			break // a live die: everything the subscription caught up on or replayed came before
		}
	}
	if ctx.Err() != nil {
		t.Fatalf("no exit of the container that exited while the stream was down; seen %v", seen)
	}
	for _, w := range []struct {
		name, id string
		code     int
	}{{"lost", lost, 3}, {"replayed", replayed, 4}, {"last", last, 5}} {
		if x, ok := seen[w.id]; !ok || x.ExitCode != w.code {
			t.Errorf("the exit of %s (%.12s): sent %v, %+v; want sent with code %d", w.name, w.id, ok, x, w.code)
		}
	}
}

func exitSpec(code int) event.ContainerSpec {
	return event.ContainerSpec{Command: []string{"exit", fmt.Sprint(code)}}
}

// waitStopped returns once the container has stopped.
func waitStopped(ctx context.Context, t *testing.T, e *Engine, id string) {
	t.Helper()
	res := e.cli.ContainerWait(ctx, id, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	select {
	case <-res.Result:
	case err := <-res.Error:
		t.Fatalf("wait for %s to stop: %v", id, err)
	}
}

// churn makes n throwaway containers of another agent, each created, started and removed,
// through the runtime (labelled as the agent does; the test's cleanup removes any left).
func churn(ctx context.Context, t *testing.T, n int) {
	t.Helper()
	other, _ := dockerEngine(t)
	for i := range n {
		id := startSpec(t, other, "task/churn", event.ContainerSpec{Name: fmt.Sprintf("c%d", i), Command: []string{"exit", "0"}})
		if err := other.Remove(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
}

// bufferedDies is which of the agent's containers' dies Docker still replays from after cursor.
func bufferedDies(ctx context.Context, t *testing.T, e *Engine, cursor int64) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	res := e.cli.Events(ctx, client.EventsListOptions{
		Since:   fmt.Sprintf("%d.%09d", cursor/1e9, cursor%1e9),
		Until:   fmt.Sprintf("%d.%09d", time.Now().Unix(), time.Now().Nanosecond()),
		Filters: client.Filters{}.Add("type", "container").Add("event", "die").Add("label", runtime.LabelAgent+"="+e.agent),
	})
	dies := map[string]bool{}
	for {
		select {
		case m := <-res.Messages:
			dies[m.Actor.ID] = true
		case <-res.Err: // io.EOF once the buffer is replayed
			return dies
		}
	}
}

// Whether Docker's buffer still reaches back past a cursor: yes from after the agent's die, no
// from its very nanosecond (another die of that nanosecond may have been logged before it and
// pushed out) nor from before it; and no, within seconds, while nothing of the agent's is in it
// even from a cursor ahead of the engine's clock, where Docker would wait for dies to come (the
// test's deadline would end that wait with an error). About Docker's buffer alone: Podman
// keeps its events in a file, and replays up to an end only while that end is still ahead of
// its clock, so there the answer from a second after the die depends on the test's speed (its
// catch-up: TestDockerExitLostFromTheEventBufferIsCaughtUp).
func TestDockerBufferReachesBackToTheLastDie(t *testing.T) {
	e, _ := dockerEngine(t)
	if onPodman(e) {
		t.Skip("on Podman: about Docker's buffer of its last 256 events; Podman's answer from a cursor ahead depends on its clock")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if got, err := e.replaysFrom(ctx, time.Now().Add(time.Hour).UnixNano()); err != nil || got {
		t.Fatalf("from an hour ahead, before any die: %v, %v; want false", got, err)
	}
	before := time.Now().Add(-time.Second).UnixNano()
	exits, err := e.Exits(ctx, before)
	if err != nil {
		t.Fatal(err)
	}
	x := exitEvent(ctx, t, exits, startSpec(t, e, "task/one", exitSpec(0)))
	for _, c := range []struct {
		name   string
		cursor int64
		want   bool
	}{
		{"its die", x.Cursor, false},
		{"a second after its die", x.Cursor + 1e9, true},
		{"before its die", before, false},
	} {
		if got, err := e.replaysFrom(ctx, c.cursor); err != nil || got != c.want {
			t.Errorf("from %s: %v, %v; want %v", c.name, got, err, c.want)
		}
	}
}
