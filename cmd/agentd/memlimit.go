package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"
)

// The agent's memory budget (issue 25): --memory-limit sets the Go runtime's soft memory
// limit (debug.SetMemoryLimit). Without one the runtime lets the heap grow to twice what is
// live before it collects, and keeps what it freed resident for minutes: in a burst of
// 20,000 tasks the heap goal reached 89 MB over 44 MB live. Under the limit the runtime
// collects sooner and returns freed memory at once. It is soft: the agent never fails for it,
// it only collects more often (the runtime caps that at about half the CPU) while more than
// the limit is live.
//
// "auto" (the default) is twice what the agent holds at rest, and at least 64 MiB: measured
// after recovery, and again each time the agent gives back what a burst left behind
// (engine: memory.go), so it follows what the agent remembers; while it runs, an auto limit is
// raised as a burst's live heap nears it (follow). "0" leaves the runtime's own
// (GOMEMLIMIT, or none). GOMEMLIMIT in the environment wins over "auto".

const (
	memoryLimitFloor = 64 << 20
	memoryLimitAuto  = "auto"
)

// memoryLimit is --memory-limit, parsed: auto, or a number of bytes (0: none of ours).
type memoryLimit struct {
	auto  bool
	bytes int64
}

// parseMemoryLimit reads --memory-limit: "auto", or bytes with an optional KiB, MiB or GiB.
func parseMemoryLimit(s string) (memoryLimit, error) {
	if s == memoryLimitAuto {
		return memoryLimit{auto: true}, nil
	}
	num, unit := s, int64(1)
	for suffix, mult := range map[string]int64{"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30} {
		if n, ok := strings.CutSuffix(s, suffix); ok {
			num, unit = n, mult
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/unit {
		return memoryLimit{}, fmt.Errorf("--memory-limit %q: want auto, 0, or bytes (a number, optionally with KiB, MiB or GiB)", s)
	}
	return memoryLimit{bytes: n * unit}, nil
}

// apply sets the runtime's limit for an agent that holds atRest bytes at rest, and returns
// it (0: left as the runtime has it).
func (m memoryLimit) apply(atRest int64) int64 {
	switch {
	case m.auto && os.Getenv("GOMEMLIMIT") == "":
		limit := max(memoryLimitFloor, 2*atRest)
		debug.SetMemoryLimit(limit)
		return limit
	case !m.auto && m.bytes > 0:
		debug.SetMemoryLimit(m.bytes)
		return m.bytes
	}
	return 0
}

// follow keeps an auto limit clear of what is live, until ctx ends: checked every tick, an
// auto limit under 1.2 times the live heap is raised to 1.5 times it — the headroom GOGC=50
// would give, so collection stays proportional to what is live; below that point it is left,
// since the limit's whole use is a burst's peak (issue 25: 44 MB live under 64 MB). It protects the agent's CPU: past a soft limit the runtime collects continuously (up
// to about half the CPU), and an auto limit is only set at rest — a burst of long-running
// tasks can hold more than twice that for as long as they live. It only ever raises the
// limit; the next release once idle (engine: memory.go) sets it from what is held then.
func (m memoryLimit) follow(ctx context.Context, tick time.Duration) {
	if !m.auto || os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			raiseAboveLive(goLiveHeap())
		}
	}
}

// raiseAboveLive raises the runtime's limit as limitAboveLive says, and returns the limit it
// leaves.
func raiseAboveLive(live int64) int64 {
	limit := debug.SetMemoryLimit(-1)
	if raised, ok := limitAboveLive(limit, live); ok {
		debug.SetMemoryLimit(raised)
		return raised
	}
	return limit
}

// limitAboveLive is the limit an auto limit must rise to, to keep collection proportional to
// what is live (ok: it must rise).
func limitAboveLive(limit, live int64) (int64, bool) {
	if live <= 0 || live > math.MaxInt64/2 || limit >= live+live/5 {
		return limit, false
	}
	return live + live/2, true
}

// goLiveHeap is the heap the last collection found live (0: unknown).
func goLiveHeap() int64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int64(s[0].Value.Uint64())
}

// goMemoryAtRest is what the Go runtime holds from the OS and has not given back: the agent's
// share of its resident set, bar the binary's pages and the journal's mapping.
func goMemoryAtRest() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 || s[1].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int64(s[0].Value.Uint64() - s[1].Value.Uint64())
}
