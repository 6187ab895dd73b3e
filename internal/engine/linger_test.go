package engine

import (
	"testing"
	"time"

	"github.com/agentd/agentd/internal/fsm"
)

// drained runs drainInto on its own goroutine and returns what it took, once it returned.
func drained(inputs chan Input, l *linger) <-chan []Input {
	out := make(chan []Input, 1)
	go func() {
		var took []Input
		drainInto(inputs, l, func(in Input) {
			took = append(took, in)
			if r, ok := in.(ActionResult); ok {
				l.taken(r.Action.Kind)
			}
		})
		out <- took
	}()
	return out
}

func outcome(k fsm.ActionKind) ActionResult {
	return ActionResult{Action: fsm.Action{Kind: k, Task: "t"}}
}

// A burst waits for the outcome of a fast call still running, so both share one commit.
func TestABurstWaitsForACallAboutToEnd(t *testing.T) {
	l := &linger{wait: time.Hour}
	l.started(fsm.ActCreate)
	l.started(fsm.ActStart)
	inputs := make(chan Input, 4)
	inputs <- outcome(fsm.ActCreate)
	done := drained(inputs, l)
	// The start's outcome comes later. A burst that closed without it would be seen here;
	// one that waits is never (the wait only makes a broken drain's failure likelier to show).
	select {
	case took := <-done:
		t.Fatalf("the burst closed with %d input(s) while a start was running", len(took))
	case <-time.After(200 * time.Millisecond):
	}
	inputs <- outcome(fsm.ActStart)
	select {
	case took := <-done:
		if len(took) != 2 {
			t.Fatalf("burst took %d inputs, want both outcomes", len(took))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the burst did not close once no call was running")
	}
}

// A lone outcome — no other fast call running, or only a pull or a stop, which may take
// minutes — never waits: batching adds nothing to a lone task's latency.
func TestALoneOutcomeNeverWaits(t *testing.T) {
	for _, other := range []fsm.ActionKind{"", fsm.ActPull, fsm.ActStop} {
		l := &linger{wait: time.Hour}
		l.started(fsm.ActRemove)
		if other != "" {
			l.started(other)
		}
		inputs := make(chan Input, 1)
		inputs <- outcome(fsm.ActRemove)
		select {
		case took := <-drained(inputs, l):
			if len(took) != 1 {
				t.Fatalf("with %q running: took %d inputs, want the one", other, len(took))
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("with %q running: a lone outcome waited for the linger", other)
		}
	}
}

// The wait is bounded: a running call that does not end in time is not waited for.
func TestABurstWaitsNoLongerThanItsLinger(t *testing.T) {
	l := &linger{}
	l.committed(2 * time.Millisecond)
	if l.wait != time.Millisecond {
		t.Fatalf("linger after a 2 ms commit: %v, want half of it", l.wait)
	}
	l.committed(time.Second)
	if l.wait != maxLinger {
		t.Fatalf("linger after a slow commit: %v, want the cap %v", l.wait, maxLinger)
	}
	l.started(fsm.ActStart)
	select {
	case took := <-drained(make(chan Input), l):
		if len(took) != 0 {
			t.Fatalf("took %v from an empty queue", took)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the burst waited past its linger")
	}
}
