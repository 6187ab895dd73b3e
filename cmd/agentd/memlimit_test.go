package main

import (
	"math"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

// --memory-limit sets the Go runtime's soft memory limit (issue 25): auto is twice what the
// agent holds at rest, at least 64 MiB; bytes are taken as given; 0 leaves the runtime's own;
// anything else is refused, naming the flag. A started agent has the limit applied.
func TestMemoryLimitIsApplied(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "") // auto defers to GOMEMLIMIT when it is set
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	const mib = 1 << 20
	for _, c := range []struct {
		flag   string
		atRest int64
		want   int64 // the runtime's limit after apply; 0: as it was
	}{
		{"auto", 10 * mib, 64 * mib},
		{"auto", 100 * mib, 200 * mib},
		{"256MiB", 100 * mib, 256 * mib},
		{"1GiB", 0, 1024 * mib},
		{"300000000", 0, 300000000},
		{"0", 100 * mib, 0},
	} {
		debug.SetMemoryLimit(math.MaxInt64)
		m, err := parseMemoryLimit(c.flag)
		if err != nil {
			t.Fatalf("--memory-limit %s: %v", c.flag, err)
		}
		m.apply(c.atRest)
		want := c.want
		if want == 0 {
			want = math.MaxInt64
		}
		if got := debug.SetMemoryLimit(-1); got != want {
			t.Errorf("--memory-limit %s at rest %d: the runtime's limit is %d, want %d", c.flag, c.atRest, got, want)
		}
	}
	for _, bad := range []string{"", "-1", "12bananas", "64 MB", "auto2", "99999999999GiB"} {
		if _, err := parseMemoryLimit(bad); err == nil || !strings.Contains(err.Error(), "--memory-limit") {
			t.Errorf("--memory-limit %q: %v, want an error naming the flag", bad, err)
		}
	}

	debug.SetMemoryLimit(math.MaxInt64)
	r := startTrustRig(t, t.TempDir(), agentConfig{MemoryLimit: memoryLimit{auto: true}})
	defer r.stop()
	if got := debug.SetMemoryLimit(-1); got < memoryLimitFloor || got == math.MaxInt64 {
		t.Errorf("a started agent with --memory-limit auto has the runtime's limit at %d, want at least %d", got, memoryLimitFloor)
	}
	// and follows what is live while it runs (follow): a burst holding more is not starved
	debug.SetMemoryLimit(64 * mib)
	held := make([]byte, 96*mib)
	for i := range held {
		held[i] = 1
	}
	runtime.GC()
	deadline := time.Now().Add(10 * time.Second)
	for debug.SetMemoryLimit(-1) < 144*mib {
		if time.Now().After(deadline) {
			t.Fatalf("a started agent left its auto limit at %d MiB with 96 MiB live for 10 s", debug.SetMemoryLimit(-1)/mib)
		}
		time.Sleep(50 * time.Millisecond)
	}
	runtime.KeepAlive(held)
}

// An auto limit follows what is live: a burst that holds nearly the limit set at rest (over
// five sixths) raises it to 1.5 times the live heap, so the runtime never collects
// continuously; a limit with room to spare is left alone.
func TestAnAutoLimitRisesAboveWhatIsLive(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		limit, live, want int64
		raised            bool
	}{
		{64 * mib, 44 * mib, 64 * mib, false},  // room: 64 ≥ 52.8 (the bench's peak)
		{64 * mib, 60 * mib, 90 * mib, true},   // 64 < 72: 1.5 times live
		{64 * mib, 200 * mib, 300 * mib, true}, // far over
		{64 * mib, 0, 64 * mib, false},         // unknown: left
	} {
		got, raised := limitAboveLive(c.limit, c.live)
		if got != c.want || raised != c.raised {
			t.Errorf("limit %d MiB, live %d MiB: %d MiB (raised %v), want %d MiB (raised %v)", c.limit/mib, c.live/mib, got/mib, raised, c.want/mib, c.raised)
		}
	}

	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	held := make([]byte, 96*mib) // live across the collection below
	for i := range held {
		held[i] = 1
	}
	runtime.GC()
	debug.SetMemoryLimit(64 * mib)
	if got := raiseAboveLive(goLiveHeap()); got < 144*mib {
		t.Errorf("with %d MiB live the auto limit stayed at %d MiB; want at least 144 MiB", len(held)/mib, got/mib)
	}
	runtime.KeepAlive(held)
}
