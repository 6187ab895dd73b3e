package engine

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/jitter"
)

// calls is the runtime calls the engine has made and not yet seen answered, and the failed
// ones waiting out a backoff. It guards: a decided call goes only through the core's Gate over
// what is out (fsm/gate.go), so no call is made twice at once and none overtakes the call it
// waits for; a removal beyond the slots queues (removalQ) and is handed a freed slot; a failed
// call goes again only once its backoff is over; and pulls end when the agent stops.
type calls struct {
	out       fsm.InFlight            // runtime calls on the executor, the core's view of them (fsm/gate.go)
	retryAt   map[fsm.ActionKey]retry // failed calls waiting out their backoff
	removalQ  fsm.RemovalQueue        // CLEANING tasks waiting for a removal slot (CleanupWorkers)
	pullCtx   context.Context         // pulls run under it; cancelled when the agent stops
	stopPulls context.CancelFunc
}

// retry is a failed runtime call's backoff: when it may go again, how often it failed, and
// its wait's shape (internal/jitter).
type retry struct {
	at    time.Time
	tries int
	bo    *jitter.Backoff
}

func newCalls(removalSlots int) calls {
	c := calls{out: fsm.NewInFlight(removalSlots), retryAt: map[fsm.ActionKey]retry{}}
	c.pullCtx, c.stopPulls = context.WithCancel(context.Background())
	return c
}

// backingOff reports whether a call waits out its backoff at now.
func (c *calls) backingOff(now time.Time, key fsm.ActionKey) bool {
	r, ok := c.retryAt[key]
	return ok && r.at.After(now)
}

// takeDue marks the tasks of calls whose backoff is over: their calls may go again (their
// tries keep counting until one succeeds).
func (c *calls) takeDue(now time.Time, mark func(arn string)) {
	for key, r := range c.retryAt {
		if !r.at.IsZero() && !r.at.After(now) {
			mark(key.Task)
			r.at = time.Time{}
			c.retryAt[key] = r
		}
	}
}

// next is the earliest backoff to end (zero: none waits).
func (c *calls) next() time.Time {
	var next time.Time
	for _, r := range c.retryAt {
		if !r.at.IsZero() && (next.IsZero() || r.at.Before(next)) {
			next = r.at
		}
	}
	return next
}

// failed schedules a call again, later each time it fails, and returns its backoff; the
// jitter is the loop's generator's (rng), so a seeded run replays.
func (c *calls) failed(now time.Time, key fsm.ActionKey, rng *rand.Rand) retry {
	r := c.retryAt[key]
	if r.bo == nil {
		r.bo = jitter.NewBackoff(200*time.Millisecond, 30*time.Second, rng)
	}
	r.tries++
	r.at = now.Add(r.bo.NextBackOff())
	c.retryAt[key] = r
	return r
}

// succeeded ends a call's backoff: it need not go again.
func (c *calls) succeeded(key fsm.ActionKey) { delete(c.retryAt, key) }

// forget drops the backoffs of a cleaned task's calls: it no longer needs them.
func (c *calls) forget(arn string) {
	for k := range c.retryAt {
		if k.Task == arn {
			delete(c.retryAt, k)
		}
	}
}

// view is what is out as the removal queue reads it: with the calls backing off now and the
// tasks quarantined (fsm.RemovalQueue.Next).
func (c *calls) view(now time.Time, out fsm.InFlight, quarantined map[string]string) fsm.InFlight {
	v := out
	v.Quarantined, v.Backoff = quarantined, map[fsm.ActionKey]bool{}
	for k, r := range c.retryAt {
		if r.at.After(now) {
			v.Backoff[k] = true
		}
	}
	return v
}
