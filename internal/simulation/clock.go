package simulation

// Virtual time: the clock the run moves itself, and the calls in flight on the simulated
// executor, each completing at a time drawn from the seed (ties broken by issue order, so a
// seed always completes them in the same order).

import (
	"container/heap"
	"context"
	"time"

	"github.com/agentd/agentd/internal/engine"
)

// clock is the virtual clock.
type clock struct{ now time.Time }

func (c *clock) Now() time.Time                         { return c.now }
func (c *clock) After(d time.Duration) <-chan time.Time { return nil } // the run steps time itself

// work is one call in flight on the simulated executor: it completes at a virtual time.
type work struct {
	at  time.Time
	n   int
	run func() engine.Input
}

type workQueue []work

func (q workQueue) Len() int { return len(q) }
func (q workQueue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].n < q[j].n
}
func (q workQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *workQueue) Push(x any)   { *q = append(*q, x.(work)) }
func (q *workQueue) Pop() any {
	o := *q
	x := o[len(o)-1]
	*q = o[:len(o)-1]
	return x
}

// executor completes each call after a latency drawn from the seed.
type executor struct{ s *sim }

func (x executor) Go(f func() engine.Input) {
	s := x.s
	s.n++
	heap.Push(&s.queue, work{at: s.clock.now.Add(time.Duration(s.rng.IntN(200)) * time.Millisecond), n: s.n, run: f})
}

// runWork completes the earliest call in flight if it is due.
func (s *sim) runWork() bool {
	if len(s.queue) == 0 || s.queue[0].at.After(s.clock.now) {
		return false
	}
	w := heap.Pop(&s.queue).(work)
	in := w.run()
	s.log("completes: %s", describe(in))
	s.e.Step(context.Background(), in)
	return true
}

// advance moves the virtual clock to the next thing that happens by itself, or by a little.
func (s *sim) advance(limit time.Duration) {
	next := s.clock.now.Add(limit)
	for _, t := range []time.Time{s.e.NextWake()} {
		if !t.IsZero() && t.Before(next) {
			next = t
		}
	}
	if len(s.queue) > 0 && s.queue[0].at.Before(next) {
		next = s.queue[0].at
	}
	if _, exit := s.rt.ExitsAfter(s.mark); !exit.IsZero() && exit.Before(next) {
		next = exit
	}
	if _, verdict := s.rt.Verdicts(); !verdict.IsZero() && verdict.Before(next) {
		next = verdict
	}
	if next.After(s.clock.now) {
		s.clock.now = next
	}
	s.feedHealth()
	s.e.Step(context.Background(), nil)
}
