// Package benchmark measures agentd against its baselines, side by side in one run on one
// disk, because the machines it runs on are shared and noisy: every figure it reports comes
// with the baseline it is compared to.
package benchmark

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/journal"
)

// JournalOptions configure the journal benchmark.
type JournalOptions struct {
	Dir       string // where the files go (the disk being qualified); a temp dir inside it is removed after
	Events    int    // events per contender
	Producers int    // concurrent appenders
	Rounds    int    // interleaved rounds; each contender's median round is reported (default 3)
}

// Contender is one way of appending, measured.
type Contender struct {
	Name             string        `json:"name"`
	Events           int           `json:"events"`
	Elapsed          time.Duration `json:"elapsed_ns"`
	EventsPerSec     float64       `json:"events_per_sec"`
	P50              time.Duration `json:"p50_ns"`
	P99              time.Duration `json:"p99_ns"`
	BytesPerEvent    float64       `json:"bytes_per_event"`
	Commits          int64         `json:"commits"`
	RecordsPerCommit float64       `json:"records_per_commit"`
	PagesPerCommit   float64       `json:"pages_per_commit"` // pages written a commit, the meta page included
}

// JournalResult holds the contenders and the ratios the targets are stated in.
type JournalResult struct {
	Producers     int       `json:"producers"`
	Rounds        int       `json:"rounds"`
	Naive         Contender `json:"naive"`
	Batch         Contender `json:"batch"`
	Journal       Contender `json:"journal"`
	Ceiling       Contender `json:"ceiling"`  // raw bbolt, the journal's layout and records per commit, one writer
	Shipping      Contender `json:"shipping"` // the journal's group commit with the OTLP shipper running on it
	NaiveEPS      float64   `json:"naive_eps"`
	BatchEPS      float64   `json:"batch_eps"`
	JournalEPS    float64   `json:"journal_eps"`
	CeilingEPS    float64   `json:"ceiling_eps"`
	JournalP99ms  float64   `json:"journal_p99_ms"`
	BytesPerEvent float64   `json:"bytes_per_event"`
	VsNaive       float64   `json:"ratio_vs_naive"`
	VsBatch       float64   `json:"ratio_vs_batch"`
	VsCeiling     float64   `json:"ratio_vs_ceiling"`
	ShippingVsOff float64   `json:"ratio_shipping_on_vs_off"` // the median of ShippingPairs
	// ShippingPairs are the ratios of the runs with shipping and without, pair by pair: their
	// spread is what a shared machine's noise does to one pair (ratios of 0.7 to 1.5 between
	// two runs of the same journal were seen at a load of 25 on 2 cores).
	ShippingPairs []float64 `json:"shipping_pairs"`
	// The scheduler's part of the gap to the ceiling (see refillFloor): the ceiling's mean
	// commit, the producers' refill between two commits without I/O, and the share of the
	// ceiling a journal could reach if it cost nothing else, c/(c+floor).
	CeilingCommit time.Duration `json:"ceiling_commit_ns"`
	RefillFloor   time.Duration `json:"refill_floor_ns"`
	CeilingBound  float64       `json:"ceiling_bound"`
}

// recordsPerTask is about how many records one task's life leaves: added, four transitions per
// container, seven of the task, its ack and its cleanup.
const recordsPerTask = 15

// typicalRecord is a container transition of a task with a realistic ARN: what the journal
// mostly holds. Only the transition that learns a runtime id carries it; this one does not.
func typicalRecord(p, i int) event.Record {
	return event.Record{
		Time:      time.Now(),
		Task:      typicalARN(p, i),
		Container: "app",
		Event:     &event.ContainerTransitioned{From: event.StatusCreated, To: event.StatusRunning},
	}
}

func typicalARN(p, i int) string {
	return "arn:agentd:task/web-" + strconv.Itoa(10000+p) + "-" + strconv.Itoa(100000000+i/recordsPerTask)
}

// producerRecords makes each producer's records with the ARN built once a task (every
// recordsPerTask appends), not once an append: the harness's own cost stays out of the
// contenders' figures, as it stays out of the ceiling's (whose records are built beforehand).
type producerRecords struct{ arns []string }

func newProducerRecords(producers int) *producerRecords {
	return &producerRecords{arns: make([]string, producers)}
}

// record is typicalRecord(p, i); each producer p calls it from its own goroutine only.
func (r *producerRecords) record(p, i int) event.Record {
	if i%recordsPerTask == 0 || r.arns[p] == "" {
		r.arns[p] = typicalARN(p, i)
	}
	return event.Record{Time: time.Now(), Task: r.arns[p], Container: "app", Event: typicalEvent}
}

// typicalEvent is shared by the records producerRecords makes: appenders only read it.
var typicalEvent = &event.ContainerTransitioned{From: event.StatusCreated, To: event.StatusRunning}

// Journal runs the contenders — bbolt with one commit per event, bbolt's DB.Batch, the
// journal's group commit, and the ceiling of the journal's own layout — in interleaved rounds,
// each round on fresh files in the same directory, and reports each contender's median run (of
// an even count, the slower middle one): the disk's background flushing and the neighbours'
// load then weigh on all alike. Every
// contender has fsync'd an event before its append returns.
//
// The ceiling is what bbolt alone can do with the journal's layout: one goroutine committing,
// every commit synced, records encoded beforehand, as many records a commit as the journal
// carried in the same round. The journal can only approach it; how near is the cost of the
// journal itself (queueing, waking appenders, encoding, checksums). Like the other ratios, it
// is taken between the contenders' median rounds.
func Journal(ctx context.Context, o JournalOptions) (JournalResult, error) {
	if o.Events <= 0 || o.Producers <= 0 {
		return JournalResult{}, fmt.Errorf("bench journal: --events and --producers must be positive")
	}
	if o.Rounds <= 0 {
		o.Rounds = 3
	}
	dir, err := os.MkdirTemp(o.Dir, "agentd-bench-")
	if err != nil {
		return JournalResult{}, fmt.Errorf("bench journal: --dir %s: %w", o.Dir, err)
	}
	defer os.RemoveAll(dir)
	per := o
	per.Events = max(o.Events/o.Rounds, o.Producers)
	var naive, batch, jour, ceiling, shipped []Contender
	type run struct {
		into *[]Contender
		f    func(string) (Contender, error)
	}
	for r := 0; r < o.Rounds; r++ {
		// The journal without shipping and with it in four pairs of runs back to back, ABBA
		// BAAB: each order twice and each half of the round's positions once, so neither a run's
		// place in the pair (the first warms what the second finds warm) nor its place in the
		// round (the disk still writing back the earlier contenders) favours one.
		off := run{&jour, func(p string) (Contender, error) { return benchJournal(ctx, p, per) }}
		on := run{&shipped, func(p string) (Contender, error) { return benchJournalWith(ctx, p, per, shipping) }}
		abba := []run{off, on, on, off, on, off, off, on}
		for _, run := range append([]run{
			{&naive, func(p string) (Contender, error) { return benchBolt(ctx, p, per, false) }},
			{&batch, func(p string) (Contender, error) { return benchBolt(ctx, p, per, true) }},
		}, append(abba, run{&ceiling, func(p string) (Contender, error) {
			return benchCeiling(ctx, p, per, jour[len(jour)-1].RecordsPerCommit)
		}})...) {
			path := filepath.Join(dir, fmt.Sprintf("round%d-%d.db", r, len(*run.into)))
			c, err := run.f(path)
			if err != nil {
				return JournalResult{}, err
			}
			*run.into = append(*run.into, c)
			_ = os.Remove(path)
		}
	}
	// Shipping's cost is judged pair by pair, before median sorts the runs: the i-th runs with
	// and without shipping ran back to back (ABBA BAAB appends each pair's at the same index).
	res := JournalResult{ShippingPairs: make([]float64, len(jour))}
	for i := range jour {
		res.ShippingPairs[i] = shipped[i].EventsPerSec / jour[i].EventsPerSec
	}
	res.ShippingVsOff = medianRatio(res.ShippingPairs)
	res.Producers, res.Rounds = o.Producers, o.Rounds
	res.Naive, res.Batch, res.Journal, res.Ceiling, res.Shipping = median(naive), median(batch), median(jour), median(ceiling), median(shipped)
	res.NaiveEPS, res.BatchEPS, res.JournalEPS, res.CeilingEPS = res.Naive.EventsPerSec, res.Batch.EventsPerSec, res.Journal.EventsPerSec, res.Ceiling.EventsPerSec
	res.JournalP99ms = float64(res.Journal.P99) / float64(time.Millisecond)
	res.BytesPerEvent = res.Journal.BytesPerEvent
	res.VsNaive = res.JournalEPS / res.NaiveEPS
	res.VsBatch = res.JournalEPS / res.BatchEPS
	res.VsCeiling = res.JournalEPS / res.CeilingEPS
	if res.Ceiling.Commits > 0 {
		res.CeilingCommit = res.Ceiling.Elapsed / time.Duration(res.Ceiling.Commits)
		res.RefillFloor = refillFloor(o.Producers, res.CeilingCommit, 500)
		res.CeilingBound = float64(res.CeilingCommit) / float64(res.CeilingCommit+res.RefillFloor)
	}
	return res, nil
}

// medianRatio is the median of ratios (of an even count, the geometric mean of the middle two:
// neither the better nor the worse of them).
func medianRatio(ratios []float64) float64 {
	s := slices.Sorted(slices.Values(ratios))
	if n := len(s); n%2 == 0 {
		return math.Sqrt(s[n/2-1] * s[n/2])
	}
	return s[len(s)/2]
}

// median is the run with the median throughput (of an even count, the slower middle one).
func median(cs []Contender) Contender {
	slices.SortFunc(cs, func(a, b Contender) int { return cmp.Compare(a.EventsPerSec, b.EventsPerSec) })
	return cs[(len(cs)-1)/2]
}

// drive runs append on Producers goroutines until Events appends have returned, recording
// each one's latency. appendOne gets the producer and its own count of appends.
func drive(ctx context.Context, o JournalOptions, name string, appendOne func(p, i int) error) (Contender, error) {
	var next atomic.Int64
	lat := make([]time.Duration, o.Events)
	var wg sync.WaitGroup
	var firstErr error
	var once sync.Once
	start := time.Now()
	for p := 0; p < o.Producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; ctx.Err() == nil; k++ {
				i := int(next.Add(1)) - 1
				if i >= o.Events {
					return
				}
				t := time.Now()
				if err := appendOne(p, k); err != nil {
					once.Do(func() { firstErr = fmt.Errorf("bench journal: %s: %w", name, err) })
					return
				}
				lat[i] = time.Since(t)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	slices.Sort(lat)
	return Contender{
		Name: name, Events: o.Events, Elapsed: elapsed,
		EventsPerSec: float64(o.Events) / elapsed.Seconds(),
		P50:          lat[len(lat)/2], P99: lat[len(lat)*99/100],
	}, firstErr
}

// openBolt opens a plain bbolt file as the journal opens its own, with its records bucket.
func openBolt(path string) (*bolt.DB, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
	if err != nil {
		return nil, err
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucket([]byte("records"))
		return err
	}); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// pages is how many pages the write transactions of db have allocated so far.
func pages(db *bolt.DB) int64 {
	st := db.Stats()
	return st.TxStats.GetPageCount()
}

// benchBolt stores the same encoded records under the same keys as the journal does, through
// plain bbolt: one Update per event, or DB.Batch.
func benchBolt(ctx context.Context, path string, o JournalOptions, batch bool) (Contender, error) {
	db, err := openBolt(path)
	if err != nil {
		return Contender{}, err
	}
	defer db.Close()
	name, commit := "bbolt one commit per event", db.Update
	if batch {
		name, commit = "bbolt DB.Batch", db.Batch
	}
	var commits atomic.Int64
	pages0 := pages(db)
	recs := newProducerRecords(o.Producers)
	c, err := drive(ctx, o, name, func(p, i int) error {
		rec := recs.record(p, i)
		return commit(func(tx *bolt.Tx) error {
			commits.Add(1) // DB.Batch may run a function twice; close enough for a figure
			b := tx.Bucket([]byte("records"))
			b.FillPercent = 1.0
			seq, _ := b.NextSequence()
			rec.Seq = seq
			v, err := journal.EncodeRecord(rec)
			if err != nil {
				return err
			}
			return b.Put(binary.BigEndian.AppendUint64(nil, seq), v)
		})
	})
	if err == nil {
		c.BytesPerEvent = usedBytes(db) / float64(o.Events)
		if !batch {
			c.Commits = commits.Load()
			c.RecordsPerCommit = float64(o.Events) / float64(c.Commits)
			c.PagesPerCommit = float64(pages(db)-pages0)/float64(c.Commits) + 1
		}
	}
	return c, err
}

// benchCeiling is the physical ceiling of the journal's layout: bbolt alone, one goroutine,
// the journal's records (encoded beforehand) under its keys, perCommit records a commit,
// every commit synced.
func benchCeiling(ctx context.Context, path string, o JournalOptions, perCommit float64) (Contender, error) {
	db, err := openBolt(path)
	if err != nil {
		return Contender{}, err
	}
	defer db.Close()
	k := max(1, int(perCommit+0.5))
	vals := make([][]byte, o.Events)
	for i := range vals {
		rec := typicalRecord(i%o.Producers, i/o.Producers)
		rec.Seq = uint64(i + 1)
		if vals[i], err = journal.EncodeRecord(rec); err != nil {
			return Contender{}, err
		}
	}
	name := fmt.Sprintf("bbolt alone, %d records a commit (ceiling)", k)
	lat := make([]time.Duration, 0, o.Events/k+1)
	pages0 := pages(db)
	start := time.Now()
	for i := 0; i < o.Events && ctx.Err() == nil; i += k {
		t := time.Now()
		err := db.Update(func(tx *bolt.Tx) error {
			b := tx.Bucket([]byte("records"))
			b.FillPercent = 1.0
			for n := i; n < min(i+k, o.Events); n++ {
				if err := b.Put(binary.BigEndian.AppendUint64(nil, uint64(n+1)), vals[n]); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return Contender{}, fmt.Errorf("bench journal: %s: %w", name, err)
		}
		lat = append(lat, time.Since(t))
	}
	elapsed := time.Since(start)
	if err := ctx.Err(); err != nil {
		return Contender{}, err
	}
	slices.Sort(lat)
	c := Contender{Name: name, Events: o.Events, Elapsed: elapsed, EventsPerSec: float64(o.Events) / elapsed.Seconds(),
		P50: lat[len(lat)/2], P99: lat[len(lat)*99/100], BytesPerEvent: usedBytes(db) / float64(o.Events),
		Commits: int64(len(lat)), RecordsPerCommit: float64(o.Events) / float64(len(lat))}
	c.PagesPerCommit = float64(pages(db)-pages0)/float64(c.Commits) + 1
	return c, nil
}

func benchJournal(ctx context.Context, path string, o JournalOptions) (Contender, error) {
	return benchJournalWith(ctx, path, o, nil)
}

// benchJournalWith is benchJournal with beside, when given, running on the open journal for
// the length of the run (the OTLP shipper: shipping must not cost the commits).
func benchJournalWith(ctx context.Context, path string, o JournalOptions, beside func(context.Context, *journal.Journal) func()) (Contender, error) {
	j, err := journal.Open(path, journal.Options{})
	if err != nil {
		return Contender{}, err
	}
	defer j.Close()
	if beside != nil {
		bctx, cancel := context.WithCancel(ctx)
		stop := beside(bctx, j)
		defer func() { cancel(); stop() }()
	}
	stats0, pages0 := j.Stats(), pages(j.DB())
	recs := newProducerRecords(o.Producers)
	c, err := drive(ctx, o, "journal group commit", func(p, i int) error {
		_, err := j.Append(ctx, recs.record(p, i))
		return err
	})
	if err == nil {
		c.BytesPerEvent = usedBytes(j.DB()) / float64(o.Events)
		c.Commits = int64(j.Stats().Commits - stats0.Commits)
		c.RecordsPerCommit = float64(o.Events) / float64(c.Commits)
		c.PagesPerCommit = float64(pages(j.DB())-pages0)/float64(c.Commits) + 1
	}
	return c, err
}

// usedBytes is the extent of the file bbolt has allocated pages in: what the data occupies,
// without the growth slack bbolt preallocates.
func usedBytes(db *bolt.DB) float64 {
	var n int64
	_ = db.View(func(tx *bolt.Tx) error { n = tx.Size(); return nil })
	return float64(n)
}
