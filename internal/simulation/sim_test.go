package simulation

import (
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

func runSeed(t testing.TB, s uint64) Result {
	dir, err := os.MkdirTemp(TempDir(), "agentd-sim-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	return Run(Options{Seed: s, Dir: dir})
}

func report(t *testing.T, r Result) {
	t.Helper()
	t.Errorf("seed %d failed: %s\nreplay: go test ./internal/simulation -run 'TestSim$' -seed %d -v\nthe steps about it:\n%s\nthe protocol model: %s",
		r.Seed, r.Failure, r.Seed, strings.Join(r.Focus, "\n"), modelVerdict(r))
}

// TestSim runs many seeds of the whole agent under throttling, 5xx, lost answers, re-sent
// payloads, stops and crashes: no seed may break the guard, run anything twice, or fail to
// settle. -seed N replays one seed (and prints its trace with -v); -seeds N -seed-offset K
// runs K+1 … K+N, and -seed-offset random a fresh stretch, named before it starts.
func TestSim(t *testing.T) {
	if *seed != 0 {
		r := runSeed(t, *seed)
		for _, l := range r.Trace {
			t.Log(l)
		}
		if r.Failure != "" {
			report(t, r)
		}
		return
	}
	n := *seeds
	if testing.Short() {
		n = 50
	}
	off, err := seedRange(*offset, n, freshOffset)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("seeds %d … %d (-seed-offset %d -seeds %d runs them again; -seed N replays one)", off+1, off+uint64(n), off, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed []Result
	var records, crashes atomic.Int64
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				r := runSeed(t, off+uint64(i))
				records.Add(int64(r.Records))
				crashes.Add(int64(r.Crashes))
				if r.Failure != "" {
					mu.Lock()
					failed = append(failed, r)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d seeds (%d … %d), %d records journaled, %d crashes, %d failed", n, off+1, off+uint64(n), records.Load(), crashes.Load(), len(failed))
	for i, r := range failed {
		if i == 3 {
			break
		}
		report(t, r)
	}
}

// The same seed gives the same run, step by step.
func TestSimIsDeterministic(t *testing.T) {
	for _, s := range []uint64{7, 42, 1234} {
		a, b := runSeed(t, s), runSeed(t, s)
		if a.TraceHash != b.TraceHash || a.Records != b.Records || a.Steps != b.Steps {
			t.Fatalf("seed %d ran two ways: %d/%d records, %d/%d steps\nfirst:\n%s\nsecond:\n%s", s, a.Records, b.Records, a.Steps, b.Steps,
				strings.Join(a.Trace[max(0, len(a.Trace)-20):], "\n"), strings.Join(b.Trace[max(0, len(b.Trace)-20):], "\n"))
		}
	}
}

// findsPlantedBug runs seeds 1…bound until one fails with the failure a planted bug must
// cause (its prefix), and fails the test if none does: a simulation that passes with a bug
// planted proves nothing by passing without it.
func findsPlantedBug(t *testing.T, prefix string, bound uint64) {
	t.Helper()
	for s := uint64(1); s <= bound; s++ {
		if r := runSeed(t, s); strings.HasPrefix(r.Failure, prefix) {
			t.Logf("seed %d finds the planted bug after %d steps: %s\nthe protocol model: %s", s, r.Steps, r.Failure, modelVerdict(r))
			return
		}
	}
	t.Fatalf("the simulation did not find the planted bug (%s) in %d seeds", prefix, bound)
}

// modelVerdict is what the independent protocol model said of a failed seed's journal.
func modelVerdict(r Result) string {
	if len(r.Model) == 0 {
		return "the journal keeps every rule it checks"
	}
	return strings.Join(r.Model, "\n  ")
}
