package engine

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/jitter"
)

// calls is the engine's side of the runtime calls: how long a failed call waits before it
// goes again (the node keeps which calls are out and backing off, fsm/nodecalls.go), and the
// context pulls run under. It guards that a failed call's wait grows each time it fails, that
// its jitter is the loop's seeded generator's (a seeded run replays), and that pulls end when
// the agent stops.
type calls struct {
	retryAt   map[fsm.ActionKey]retry // failed calls and their backoffs
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

func newCalls() calls {
	c := calls{retryAt: map[fsm.ActionKey]retry{}}
	c.pullCtx, c.stopPulls = context.WithCancel(context.Background())
	return c
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
