package testrig

// A virtual clock: time moves only when the test sets or advances it, and a wait asked of it
// ends only then (or when the test fires it), never by the wall clock.

import (
	"sync"
	"time"
)

// Clock is a virtual clock (engine.Clock). Its zero value stands at the zero time.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	timers []timer
	// Waits, when set, is handed every wait asked of After instead of the clock timing it:
	// the test ends each with Wait.Fire (a test of what waits are asked for).
	Waits chan Wait
}

type timer struct {
	at time.Time
	ch chan time.Time
}

// Wait is one wait asked of a Clock with Waits set.
type Wait struct {
	D    time.Duration
	fire chan time.Time
}

// Fire ends the wait.
func (w Wait) Fire(at time.Time) { w.fire <- at }

// NewClock is a clock standing at now.
func NewClock(now time.Time) *Clock { return &Clock{now: now} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After is a channel given the clock's time once it has moved d on (at once for d ≤ 0).
func (c *Clock) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	if c.Waits != nil {
		c.Waits <- Wait{D: d, fire: ch}
		return ch
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.timers = append(c.timers, timer{at: c.now.Add(d), ch: ch})
	return ch
}

// Set moves the clock to t (never back: an earlier t leaves it where it is) and ends the waits
// due by then.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.now) {
		c.now = t
	}
	kept := c.timers[:0]
	for _, tm := range c.timers {
		if tm.at.After(c.now) {
			kept = append(kept, tm)
			continue
		}
		tm.ch <- c.now
	}
	clear(c.timers[len(kept):])
	c.timers = kept
}

// Advance moves the clock on by d.
func (c *Clock) Advance(d time.Duration) { c.Set(c.Now().Add(d)) }
