package simulation

// Virtual time: the clock the run moves itself (testrig.Clock), and the calls in flight on the
// simulated executor (testrig.Executor), each completing at a latency drawn from the seed
// (ties broken by issue order, so a seed always completes them in the same order).

import (
	"context"
	"time"
)

// runWork completes the earliest call in flight if it is due.
func (s *sim) runWork() bool {
	run := s.exec.Next()
	if run == nil {
		return false
	}
	in := run()
	s.log("completes: %s", describe(in))
	s.e.Step(context.Background(), in)
	return true
}

// advance moves the virtual clock to the next thing that happens by itself, or by a little.
func (s *sim) advance(limit time.Duration) {
	next := s.clock.Now().Add(limit)
	for _, t := range []time.Time{s.e.NextWake()} {
		if !t.IsZero() && t.Before(next) {
			next = t
		}
	}
	if due, ok := s.exec.Due(); ok && due.Before(next) {
		next = due
	}
	if _, exit := s.rt.ExitsAfter(s.mark); !exit.IsZero() && exit.Before(next) {
		next = exit
	}
	if _, verdict := s.rt.Verdicts(); !verdict.IsZero() && verdict.Before(next) {
		next = verdict
	}
	s.clock.Set(next)
	s.feedHealth()
	s.e.Step(context.Background(), nil)
}
