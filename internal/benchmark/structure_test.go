package benchmark

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/forensics"
	"github.com/agentd/agentd/internal/journal"
)

// These tests hold the journal's shape under churn to account by counting records, pages and
// tombstones — never milliseconds — so neither a fast nor a slow machine can fool them. They
// drive the journal with the daemon's own snapshot rule (engine.SnapshotInterval) and
// compaction plan (engine.PlanCompaction), as the recovery benchmark's builder does.

// testChurn is a small host: a snapshot at least every 5,000 records, 20,000 records of history
// kept (20 s of virtual time at 1 ms a record).
func testChurn() churnConfig {
	return churnConfig{SnapshotEvery: 5000, Retention: 20 * time.Second, SizeEvery: 25000, Keep: true}
}

// replayTail counts the records a restart replays: those after the newest sound snapshot.
func replayTail(t *testing.T, j *journal.Journal) int {
	t.Helper()
	snap, _, err := j.SnapshotAtOrBefore(math.MaxUint64)
	if err != nil || snap == nil {
		t.Fatalf("no snapshot to recover from: %v", err)
	}
	n := 0
	if err := j.Iterate(snap.AtSeq+1, func(event.Record) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

// Under steady churn with compaction the file's used bytes stop growing: once the retention
// window has filled, more history costs no more disk. With a compaction that fell behind (the
// 5,000-tombstone cap) or snapshots that need contiguous runs the freed pages cannot give
// (32 KiB chunks: 250 KB more every 100k records here), the used bytes grew with every record.
// Flat here is not enough: a round that writes one long run of pages keeps the file flat while
// the pages it frees hold such a run, and grows it once they no longer do (one compaction_done
// record a round listing every task it forgot: flat for 6M records of the recovery bench, then
// 4 MB more by 10M). So no node the rounds write may span more than two pages.
func TestUsedBytesStayFlatUnderSteadyChurn(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 150k records")
	}
	t.Parallel()
	b, err := build(context.Background(), filepath.Join(t.TempDir(), journal.FileName), 150000, 100, testChurn())
	if err != nil {
		t.Fatal(err)
	}
	defer b.j.Close()
	// sizes[i] is the used bytes after (i+1)×25k records; the window (20k records) and two
	// snapshot intervals have passed by 100k.
	if len(b.sizes) < 6 {
		t.Fatalf("only %d size samples", len(b.sizes))
	}
	mid, end := b.sizes[3], b.sizes[len(b.sizes)-1]
	if end-mid > mid/100 {
		t.Fatalf("used bytes keep growing under steady churn: %d after 100k records, %d after %dk (samples %v)",
			mid, end, len(b.sizes)*25, b.sizes)
	}
	last := b.rounds[len(b.rounds)-1]
	if last.Eligible != last.Forgotten {
		t.Fatalf("the last compaction forgot %d of %d tombstones past the retention", last.Forgotten, last.Eligible)
	}
	if run, what := longestPageRun(t, b.j); run > 2 {
		t.Fatalf("%s spans %d contiguous pages: every round asks for such a run, which the pages compaction frees rarely hold, so the file grows while they stand free", what, run)
	}
	// Each round closed by many compaction_done records: what journal verify checks holds.
	if rep, err := forensics.Verify(b.j); err != nil || len(rep.Findings) > 0 {
		t.Fatalf("journal verify: %v %+v", err, rep.Findings)
	}
}

// longestPageRun is the most contiguous pages any one node of the file spans (a page and its
// overflow), and its kind: bbolt writes a node into one run of free pages, so a round that
// writes long runs can find none among the pages compaction freed — a few here, a few there —
// and grows the file instead (issue 25: the disk row grew 5 MB over 10M records with 12.8 MB
// free, from one 236 KB compaction_done record a round, 58 pages). Two pages is the most a leaf
// of half-page values takes (bbolt leaves a node of up to four values unsplit).
func longestPageRun(t *testing.T, j *journal.Journal) (int, string) {
	t.Helper()
	longest, what := 0, ""
	// Page information is read in a writable transaction, the only one bbolt promises it for.
	if err := j.DB().Update(func(tx *bolt.Tx) error {
		for id := 2; ; {
			p, err := tx.Page(id)
			if err != nil || p == nil {
				return err
			}
			if p.Type == "free" {
				id++
				continue
			}
			if n := 1 + p.OverflowCount; n > longest {
				longest, what = n, fmt.Sprintf("a %s page (%d)", p.Type, p.ID)
			}
			id += 1 + p.OverflowCount
		}
	}); err != nil {
		t.Fatal(err)
	}
	return longest, what
}

// cadenceJournal builds, as bench recovery does, a journal of about total records with 100
// live tasks that ends where one more task makes the next snapshot due; closed at the test's end.
func cadenceJournal(t *testing.T, total int) *builder {
	t.Helper()
	cfg := testChurn()
	cfg.EndAtCadence = true
	b, err := build(context.Background(), filepath.Join(t.TempDir(), journal.FileName), total, 100, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.j.Close() })
	return b
}

// A restart replays a number of records bounded by the live state and the snapshot interval,
// never by history: a journal three times as long replays no more, and the state it restores
// (tasks and tombstones) is the same size.
func TestRecoveryReplayIsBoundedByStateNotHistory(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 120k records")
	}
	t.Parallel()
	type shape struct{ tail, tombstones, interval int }
	measure := func(total int) shape {
		b := cadenceJournal(t, total)
		return shape{replayTail(t, b.j), len(b.st.Tombstones), int(engine.SnapshotInterval(b.st, b.cfg.SnapshotEvery))}
	}
	short, long := measure(30000), measure(90000)
	for _, s := range []shape{short, long} {
		// The builder commits flushAt records at a time and snapshots after a commit.
		if s.tail > s.interval+flushAt {
			t.Fatalf("a restart would replay %d records; the snapshot interval is %d", s.tail, s.interval)
		}
	}
	// 20k records of retention at 14 a task, plus what two snapshot intervals add before the
	// cut reaches them.
	maxTombs := (20000 + 2*(short.interval+flushAt)) / 14
	if long.tombstones > maxTombs || long.interval > short.interval*5/4 {
		t.Fatalf("state grows with history: %+v at 30k records, %+v at 90k (tombstones bound %d)", short, long, maxTombs)
	}
}

// After a long downtime every tombstone is past the retention at once. The first compaction
// after the restart must forget every one of them its cut reaches (a fixed cap a round left
// thousands behind, so the snapshot interval, four records per tombstone, stayed long), the
// next the rest, and the snapshot interval must come back to what the live state needs.
func TestBacklogAfterLongDowntimeIsForgotten(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 150k records")
	}
	t.Parallel()
	cfg := testChurn()
	cfg.Retention = 1000 * time.Hour // nothing expires while the host is busy
	ctx := context.Background()
	b, err := build(ctx, filepath.Join(t.TempDir(), journal.FileName), 110000, 10, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.j.Close()
	backlog := len(b.st.Tombstones)
	// The first compaction after the restart cuts up to the last snapshot taken before it.
	reach := 0
	for _, ts := range b.st.Tombstones {
		if ts.CleanSeq <= b.lastSnap {
			reach++
		}
	}
	if reach <= 5000 {
		t.Fatalf("only %d tombstones before the last snapshot: the test needs more than a capped round's worth", reach)
	}
	// Down for longer than the retention; back up, with the host's usual churn.
	b.now = b.now.Add(cfg.Retention + time.Hour)
	startInterval := int(engine.SnapshotInterval(b.st, cfg.SnapshotEvery))
	rounds, from := len(b.rounds), int(b.j.LastSeq())
	for int(b.j.LastSeq()) < from+3*startInterval && (len(b.rounds)-rounds < 2 || b.eligible() > 0) {
		if err := b.churn(ctx, int(b.j.LastSeq())+flushAt); err != nil {
			t.Fatal(err)
		}
	}
	after := b.rounds[rounds:]
	if len(after) < 2 || after[0].Forgotten != reach || b.eligible() != 0 {
		t.Fatalf("backlog of %d (%d before the last snapshot): after %d records, compactions %+v, %d left past the retention",
			backlog, reach, int(b.j.LastSeq())-from, after, b.eligible())
	}
	if got := engine.SnapshotInterval(b.st, cfg.SnapshotEvery); got != max(cfg.SnapshotEvery, uint64(4*(10+len(b.st.Tombstones)))) || len(b.st.Tombstones) > backlog/4 {
		t.Fatalf("after the backlog: snapshot interval %d with %d tombstones (it was %d with %d)", got, len(b.st.Tombstones), startInterval, backlog)
	}
}

// Issue 13 item 4: compaction cut up to the newest snapshot while the older one was kept as
// the fallback; with the newest damaged, replay from the older one met tasks whose history was
// gone and failed on every start. A damaged newest snapshot (and both damaged) must leave an
// agent that recovers to the same state.
func TestDamagedNewestSnapshotAfterCompactionRecovers(t *testing.T) {
	t.Parallel()
	cfg := testChurn()
	cfg.SnapshotEvery, cfg.Retention = 2000, time.Second // tasks expire inside one snapshot interval
	ctx := context.Background()
	for _, damage := range []int{1, 2} {
		path := filepath.Join(t.TempDir(), journal.FileName)
		b, err := build(ctx, path, 40000, 20, cfg)
		if err != nil {
			t.Fatal(err)
		}
		forgot := 0
		for _, r := range b.rounds {
			forgot += r.Forgotten
		}
		if forgot == 0 {
			b.j.Close()
			t.Fatal("no compaction forgot anything: the test proves nothing")
		}
		wantTasks, wantTombs := len(b.st.Tasks), len(b.st.Tombstones)
		seqs, err := b.j.SnapshotSeqs()
		if err != nil || len(seqs) < 2 {
			t.Fatalf("snapshots %v, %v; want two", seqs, err)
		}
		// Flip a byte in the newest snapshot (and, second time round, the fallback too).
		if err := b.j.DB().Update(func(tx *bolt.Tx) error {
			for _, at := range seqs[len(seqs)-damage:] {
				k := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint64(nil, at), 0)
				v := append([]byte(nil), tx.Bucket([]byte("snapshots")).Get(k)...)
				v[len(v)-1] ^= 0x20
				if err := tx.Bucket([]byte("snapshots")).Put(k, v); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		b.j.Close()
		_, st, err := ready(ctx, path)
		if err != nil {
			t.Fatalf("%d snapshot(s) damaged: recovery failed: %v", damage, err)
		}
		if len(st.Tasks) != wantTasks || len(st.Tombstones) != wantTombs {
			t.Fatalf("%d snapshot(s) damaged: recovered %d tasks, %d tombstones; want %d, %d", damage, len(st.Tasks), len(st.Tombstones), wantTasks, wantTombs)
		}
	}
}

// The recovery benchmark's ratio compares journals of different length and the same live
// state, so each must end at the same point of the snapshot cadence: a restart replays the
// records after the newest snapshot, up to a whole interval of them, and that tail is as
// much of the ready time as the snapshot (3.7 µs a record at 10k live tasks: 93,542 records
// cost 250 ms more than 26,832). Built to a fixed record count, the 10M journal ended a whole
// interval after its snapshot and the 1M one a quarter of it, and the ratio read 1.5 with
// the same snapshot state at both sizes. Each journal ends where one more task would make
// the next snapshot due: the longest tail a crash meets.
// TestRSSBenchRemembersTheTasksAskedFor: bench rss measures the agent at rest with exactly
// the remembered tasks it names; a builder that churned on to the snapshot cadence (bench
// recovery's journals) gave it 132,817 for 100,000, and the bench stopped with an error.
func TestRSSBenchRemembersTheTasksAskedFor(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 70k records")
	}
	t.Parallel()
	const want = 5000
	b, err := build(context.Background(), filepath.Join(t.TempDir(), journal.FileName), 14*want+1, 0, rememberedChurn())
	if err != nil {
		t.Fatal(err)
	}
	defer b.j.Close()
	if n := len(b.st.Tombstones); n != want {
		t.Fatalf("the journal remembers %d tasks, want %d", n, want)
	}
}

func TestRecoveryBenchJournalsEndAtTheSamePointOfTheSnapshotCadence(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 130k records")
	}
	t.Parallel()
	type end struct{ tail, interval, tombstones int }
	measure := func(total int) end {
		b := cadenceJournal(t, total)
		if got := replayTail(t, b.j); got != int(b.j.LastSeq()-b.lastSnap) {
			t.Fatalf("the builder's newest snapshot is at %d, the journal's leaves a tail of %d", b.lastSnap, got)
		}
		return end{replayTail(t, b.j), int(engine.SnapshotInterval(b.st, b.cfg.SnapshotEvery)), len(b.st.Tombstones)}
	}
	const perTask = 14
	short, long := measure(40000), measure(90000)
	for _, e := range []end{short, long} {
		if e.tail >= e.interval || e.interval-e.tail > perTask {
			t.Fatalf("journal ends %d records after its snapshot, the interval is %d: not where one more task makes the next snapshot due (%+v at 40k records, %+v at 90k)",
				e.tail, e.interval, short, long)
		}
	}
	if d := long.tombstones - short.tombstones; d > short.tombstones/10 || -d > short.tombstones/10 {
		t.Fatalf("the live state differs: %+v at 40k records, %+v at 90k", short, long)
	}
}
