package engine

import (
	"math/rand/v2"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Every retry in the engine waits by one shape: cenkalti/backoff's exponential (doubling from
// first, capped at max, never giving up: MaxElapsedTime 0 — the loops it paces end with their
// context or with a success), with ±50% jitter so a fleet that failed together does not retry
// together. The library draws its jitter from the global math/rand, which no seed replays
// (LIBRARY-NOTES.md), so the shape runs without randomization of its own and seeded adds the
// jitter from a generator the engine seeds: a seeded run — the simulation — replays exactly.
//
// Used for: the poller and the exit and health streams (each its own generator: they run on
// goroutines of their own), and runtime calls and reconcile retries (the loop's generator:
// the loop owns them).

// jitter is the spread of each wait: it is drawn from [1-jitter, 1+jitter] of the shape's.
const jitter = 0.5

// seeded is an exponential backoff whose jitter comes from rng.
type seeded struct {
	shape *backoff.ExponentialBackOff
	rng   *rand.Rand
}

var _ backoff.BackOff = (*seeded)(nil)

func newBackoff(first, max time.Duration, rng *rand.Rand) *seeded {
	return &seeded{rng: rng, shape: backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(first), backoff.WithMaxInterval(max), backoff.WithMultiplier(2),
		backoff.WithRandomizationFactor(0), backoff.WithMaxElapsedTime(0))}
}

// seededRand is a generator for one goroutine's backoff.
func seededRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed>>1|1)) }

// NextBackOff is the wait before the next try.
func (b *seeded) NextBackOff() time.Duration {
	return b.jittered(b.shape.NextBackOff())
}

// jittered spreads d as every step is spread.
func (b *seeded) jittered(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (1 - jitter + 2*jitter*b.rng.Float64()))
}

// Reset starts over after a success.
func (b *seeded) Reset() { b.shape.Reset() }
