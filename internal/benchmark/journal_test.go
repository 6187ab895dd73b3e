package benchmark

import (
	"context"
	"math"
	"testing"
)

func TestJournalBenchRunsAndMeasuresAllThree(t *testing.T) {
	t.Parallel()
	res, err := Journal(context.Background(), JournalOptions{Dir: t.TempDir(), Events: 400, Producers: 8})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []Contender{res.Naive, res.Batch, res.Journal} {
		if c.EventsPerSec <= 0 || c.P99 < c.P50 || c.BytesPerEvent <= 0 {
			t.Fatalf("%s: implausible figures %+v", c.Name, c)
		}
	}
	if res.VsNaive <= 0 || res.VsBatch <= 0 {
		t.Fatalf("ratios missing: %+v", res)
	}
	// Shipping is judged over four pairs a round (ABBA BAAB), and the figure is their median.
	if len(res.ShippingPairs) != 4*res.Rounds || res.ShippingVsOff != medianRatio(res.ShippingPairs) {
		t.Fatalf("shipping on vs off %.2f from pairs %v over %d rounds: want the median of four pairs a round", res.ShippingVsOff, res.ShippingPairs, res.Rounds)
	}
}

// The median of an even count of ratios favours neither middle one; an odd count's is its
// middle one.
func TestMedianRatioFavoursNeitherMiddleOne(t *testing.T) {
	for _, c := range []struct {
		ratios []float64
		want   float64
	}{
		{[]float64{0.5, 2, 1}, 1},
		{[]float64{2, 0.8, 1.25, 0.1}, 1},
		{[]float64{0.9, 0.9}, 0.9},
	} {
		if got := medianRatio(c.ratios); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("medianRatio(%v) = %v; want %v", c.ratios, got, c.want)
		}
	}
}

func BenchmarkJournalGroupCommit(b *testing.B) {
	for b.Loop() {
		if _, err := benchJournal(context.Background(), b.TempDir()+"/j.db", JournalOptions{Events: 20000, Producers: 64}); err != nil {
			b.Fatal(err)
		}
	}
}

func TestThrottledBenchSettlesEverything(t *testing.T) {
	t.Parallel()
	res, err := Throttled(context.Background(), ThrottledOptions{Dir: t.TempDir(), RPS: 20, Tasks: 300})
	if err != nil {
		t.Fatal(err)
	}
	if res.Changes != 600 || res.ChangesPerBatch < 50 {
		t.Fatalf("%+v: want all 600 changes settled in full batches", res)
	}
}

func TestWaitingBenchMeasures(t *testing.T) {
	t.Parallel()
	res, err := Waiting(context.Background(), t.TempDir(), 200)
	if err != nil {
		t.Fatal(err)
	}
	if res.Goroutines <= 0 || res.HeapMB <= 0 || res.CleanupP99ms < res.CleanupP50ms {
		t.Fatalf("implausible: %+v", res)
	}
}

func TestLifecycleBenchCleansEverything(t *testing.T) {
	t.Parallel()
	res, err := Lifecycle(context.Background(), t.TempDir(), 100)
	if err != nil {
		t.Fatal(err)
	}
	if res.TasksPerSec <= 0 || res.Records < 100*10 {
		t.Fatalf("implausible: %+v", res)
	}
}

func TestRecoveryBenchBuildsAndRecovers(t *testing.T) {
	t.Parallel()
	res, err := Recovery(context.Background(), t.TempDir(), []int{30000, 60000}, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Rows {
		if r.LiveTasks != 100 || r.ReadyMs <= 0 || r.BaselineMs <= 0 {
			t.Fatalf("implausible row %+v", r)
		}
	}
}

// The refill floor is measured, not assumed: a few microseconds at least for 64 goroutines
// woken and queued again, and the bound it gives is a share of the ceiling.
func TestJournalBenchMeasuresTheRefillFloor(t *testing.T) {
	t.Parallel()
	res, err := Journal(context.Background(), JournalOptions{Dir: t.TempDir(), Events: 3000, Producers: 64})
	if err != nil {
		t.Fatal(err)
	}
	if res.RefillFloor <= 0 || res.CeilingCommit <= 0 || res.CeilingBound <= 0 || res.CeilingBound >= 1 {
		t.Fatalf("floor %v, ceiling's commit %v, bound %.2f: implausible", res.RefillFloor, res.CeilingCommit, res.CeilingBound)
	}
}
