package testrig

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)

// The rig replays: a wait ends only once the clock is moved to it, and work runs in the order
// due, ties in the order asked, never before it is due.
func TestTheRigMovesOnlyWhenTheTestMovesIt(t *testing.T) {
	c := NewClock(t0)
	late, soon := c.After(2*time.Second), c.After(time.Second)
	c.Advance(time.Second)
	select {
	case at := <-soon:
		if !at.Equal(t0.Add(time.Second)) {
			t.Fatalf("the 1 s wait ended at %v", at)
		}
	default:
		t.Fatal("the 1 s wait did not end when the clock moved 1 s")
	}
	select {
	case <-late:
		t.Fatal("the 2 s wait ended after 1 s")
	default:
	}
	c.Set(t0) // never back
	if !c.Now().Equal(t0.Add(time.Second)) {
		t.Fatalf("the clock went back to %v", c.Now())
	}

	latencies := []time.Duration{300 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond}
	x := &Executor[int]{Clock: c, Latency: func() time.Duration { l := latencies[0]; latencies = latencies[1:]; return l }}
	for i := 1; i <= 3; i++ {
		x.Go(func() int { return i })
	}
	if f := x.Next(); f != nil {
		t.Fatalf("work %d ran before it was due", f())
	}
	c.Advance(time.Second)
	var order []int
	for f := x.Next(); f != nil; f = x.Next() {
		order = append(order, f())
	}
	if len(order) != 3 || order[0] != 2 || order[1] != 3 || order[2] != 1 {
		t.Fatalf("work ran in the order %v; want 2 3 1 (by due time, ties by issue)", order)
	}
}
