// Package jitter is the agent's one retry shape: cenkalti/backoff's exponential — doubling
// from a first wait to a cap, never giving up (MaxElapsedTime 0: the loops it paces end with
// their context or a success, and reports awaiting acknowledgement are never dropped) — each
// wait spread ±50% so a fleet that failed together does not retry together. The library draws
// its own jitter from the global math/rand, which no seed replays (LIBRARY-NOTES.md), so its
// randomization is off and the spread comes from a generator the caller seeds and owns: a
// seeded run — the simulation — replays every wait exactly.
package jitter

import (
	"math/rand/v2"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Backoff is an exponential backoff whose spread comes from its caller's generator. Like the
// library's, it is stateful and for one retry loop at a time.
type Backoff struct {
	shape *backoff.ExponentialBackOff
	rng   *rand.Rand
}

var _ backoff.BackOff = (*Backoff)(nil)

// NewBackoff waits first, then twice as long each time up to max, every wait spread by rng.
func NewBackoff(first, max time.Duration, rng *rand.Rand) *Backoff {
	return &Backoff{rng: rng, shape: backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(first), backoff.WithMaxInterval(max), backoff.WithMultiplier(2),
		backoff.WithRandomizationFactor(0), backoff.WithMaxElapsedTime(0))}
}

// NextBackOff is the wait before the next try.
func (b *Backoff) NextBackOff() time.Duration { return Spread(b.rng, b.shape.NextBackOff()) }

// Reset starts over from the first wait after a success.
func (b *Backoff) Reset() { b.shape.Reset() }

// Spread is d drawn uniformly from [d/2, 3d/2) by rng: how every wait of a Backoff is spread,
// for a caller's one-off waits too.
func Spread(rng *rand.Rand, d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.5 + rng.Float64()))
}

// Rand is a generator for one goroutine's waits, replayed by its seed.
func Rand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed>>1|1)) }
