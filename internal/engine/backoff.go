package engine

import (
	"math/rand/v2"
	"time"
)

// backoff is the engine's one exponential wait: first, doubling per try, capped at max, with
// ±50% jitter drawn from its own seeded generator (nil: none) — so a fleet that failed
// together does not retry together, and a seeded run replays. One per retrying loop: a
// generator is not safe to share between goroutines.
type backoff struct {
	first, max time.Duration
	tries      int
	rng        *rand.Rand
}

func newBackoff(first, max time.Duration, seed uint64) *backoff {
	return &backoff{first: first, max: max, rng: rand.New(rand.NewPCG(seed, seed>>1|1))}
}

// next is the wait before the next try.
func (b *backoff) next() time.Duration {
	b.tries++
	d := exponential(b.tries, b.first, b.max)
	if b.rng != nil {
		d = time.Duration(float64(d) * (0.5 + b.rng.Float64()))
	}
	return d
}

// reset starts over after a success.
func (b *backoff) reset() { b.tries = 0 }

// exponential is first·2^(tries-1), capped at max.
func exponential(tries int, first, max time.Duration) time.Duration {
	d := first
	for i := 1; i < tries && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}
