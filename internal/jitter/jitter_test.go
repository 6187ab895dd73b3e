package jitter_test

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/jitter"
)

// The one backoff shape: doubling from the first step to the cap, each step spread ±50% by the
// seeded generator (the same seed replays the same waits), and a reset starts over.
func TestBackoffDoublesToItsCapSpreadAndReplays(t *testing.T) {
	steps := func(seed uint64) []time.Duration {
		b := jitter.NewBackoff(100*time.Millisecond, time.Second, jitter.Rand(seed))
		var out []time.Duration
		for i := 0; i < 7; i++ {
			out = append(out, b.NextBackOff())
		}
		b.Reset()
		return append(out, b.NextBackOff())
	}
	got := steps(42)
	base := []time.Duration{100, 200, 400, 800, 1000, 1000, 1000, 100}
	spread := false
	for i, d := range got {
		want := base[i] * time.Millisecond
		if d < want/2 || d > want*3/2 {
			t.Fatalf("step %d: %v; want %v ±50%% (steps %v)", i, d, want, got)
		}
		spread = spread || d != want
	}
	if !spread {
		t.Fatalf("no step spread: %v", got)
	}
	if again := steps(42); !slices.Equal(again, got) {
		t.Fatalf("the same seed gave %v, then %v: a seeded simulation would not replay", got, again)
	}
	if other := steps(43); slices.Equal(other, got) {
		t.Fatalf("seeds 42 and 43 gave the same waits %v: the spread ignores its generator", got)
	}
}

// A one-off wait is spread as a step is: within ±50%, and a fleet's agents, seeded apart,
// do not all wait the same.
func TestSpreadStaysWithinHalfEitherWay(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	seen := map[time.Duration]bool{}
	for range 1000 {
		d := jitter.Spread(rng, time.Second)
		if d < 500*time.Millisecond || d >= 1500*time.Millisecond {
			t.Fatalf("spread of 1s gave %v; want [500ms, 1.5s)", d)
		}
		seen[d] = true
	}
	if len(seen) < 900 {
		t.Fatalf("1000 spreads of 1s gave only %d distinct waits", len(seen))
	}
}

// The waits of a seed are pinned: the engine's scripts and the simulation's traces replay
// from them, so a change to the shape or the spread — however harmless it looks — shows here
// first, not as a drifted golden file elsewhere.
func TestASeedsWaitsArePinned(t *testing.T) {
	b := jitter.NewBackoff(100*time.Millisecond, time.Second, jitter.Rand(42))
	want := []time.Duration{78255542, 264844554, 482483751, 703843173, 1044060208}
	for i, w := range want {
		if got := b.NextBackOff(); got != w {
			t.Fatalf("wait %d of seed 42: %d; want %d (the replay of every seeded run changed)", i, got, w)
		}
	}
}
