package main

import (
	"math"
	"runtime/debug"
	"strings"
	"testing"
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
}
