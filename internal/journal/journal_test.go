package journal_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/journal"
	"github.com/agentd/agentd/internal/journal/journaltest"
)

var t0 = time.Date(2026, 11, 29, 10, 0, 0, 123456789, time.UTC)

func open(t *testing.T, path string) *journal.Journal {
	t.Helper()
	j, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

func transition(task, container string, from, to event.Status, i int) event.Record {
	return event.Record{
		Time: t0.Add(time.Duration(i) * time.Millisecond), Task: task, Container: container,
		Event: &event.ContainerTransitioned{From: from, To: to, RuntimeID: fmt.Sprintf("sim-%08d", i)},
	}
}

func collect(t *testing.T, j *journal.Journal, from uint64) []event.Record {
	t.Helper()
	var out []event.Record
	if err := j.Iterate(from, func(r event.Record) error { out = append(out, r); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestAppendIsDurableAcrossReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data", journal.FileName)
	j, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	id := j.ID()
	got, err := j.Append(context.Background(),
		transition("task/a", "app", event.StatusNone, event.StatusPulled, 1),
		transition("task/a", "app", event.StatusPulled, event.StatusCreated, 2))
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Seq != 1 || got[1].Seq != 2 {
		t.Fatalf("sequence numbers %d, %d; want 1, 2", got[0].Seq, got[1].Seq)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{path: 0o600, filepath.Dir(path): 0o700} {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != want {
			t.Fatalf("%s: mode %v, %v; want %v", p, st.Mode().Perm(), err, want)
		}
	}
	j = open(t, path)
	if j.ID() != id {
		t.Fatalf("journal id changed across reopen: %q then %q", id, j.ID())
	}
	recs := collect(t, j, 1)
	if len(recs) != 2 || j.LastSeq() != 2 {
		t.Fatalf("after reopen: %d records, last %d; want 2, 2", len(recs), j.LastSeq())
	}
	ct := recs[1].Event.(*event.ContainerTransitioned)
	if recs[1].Task != "task/a" || recs[1].Container != "app" || ct.To != event.StatusCreated || !recs[1].Time.Equal(t0.Add(2*time.Millisecond)) {
		t.Fatalf("record 2 read back as %+v %+v", recs[1], ct)
	}
	more, err := j.Append(context.Background(), transition("task/a", "app", event.StatusCreated, event.StatusRunning, 3))
	if err != nil || more[0].Seq != 3 {
		t.Fatalf("append after reopen: seq %v, %v; want 3", more, err)
	}
}

func TestAppendIsAllOrNothing(t *testing.T) {
	j := open(t, filepath.Join(t.TempDir(), journal.FileName))
	bad := event.Record{Time: t0, Task: "task/a", Event: &event.ContainerTransitioned{ExitCode: nil}}
	bad.Event = badEvent{}
	_, err := j.Append(context.Background(), transition("task/a", "app", event.StatusNone, event.StatusPulled, 1), bad)
	if err == nil || !strings.Contains(err.Error(), "record 2 of 2") {
		t.Fatalf("append with an unencodable second record: err %v; want one naming record 2 of 2", err)
	}
	if j.LastSeq() != 0 || len(collect(t, j, 1)) != 0 {
		t.Fatalf("a failed append left records behind (last %d)", j.LastSeq())
	}
}

type badEvent struct{}

func (badEvent) Type() event.Type { return 999 }

func TestConcurrentAppendersGetDistinctContiguousSequences(t *testing.T) {
	j := open(t, filepath.Join(t.TempDir(), journal.FileName))
	const producers, each = 64, 40
	var wg sync.WaitGroup
	seen := make(chan uint64, producers*each*2)
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				// Pairs test that a multi-record append stays contiguous under contention.
				recs, err := j.Append(context.Background(),
					transition(fmt.Sprintf("task/%d", p), "app", event.StatusNone, event.StatusPulled, i),
					transition(fmt.Sprintf("task/%d", p), "app", event.StatusPulled, event.StatusCreated, i))
				if err != nil {
					t.Error(err)
					return
				}
				if recs[1].Seq != recs[0].Seq+1 {
					t.Errorf("one append split: %d, %d", recs[0].Seq, recs[1].Seq)
				}
				seen <- recs[0].Seq
				seen <- recs[1].Seq
			}
		}()
	}
	wg.Wait()
	close(seen)
	got := map[uint64]bool{}
	for s := range seen {
		if got[s] {
			t.Fatalf("sequence %d handed out twice", s)
		}
		got[s] = true
	}
	total := uint64(producers * each * 2)
	for s := uint64(1); s <= total; s++ {
		if !got[s] {
			t.Fatalf("sequence %d never handed out", s)
		}
	}
	if recs := collect(t, j, 1); uint64(len(recs)) != total {
		t.Fatalf("journal holds %d records; want %d", len(recs), total)
	}
	if st := j.Stats(); st.Commits >= st.Records/2 {
		t.Fatalf("%d commits for %d records from 64 producers: group commit is not grouping", st.Commits, st.Records)
	}
}

func TestTaskRecordsFindEveryRecordOfTheTask(t *testing.T) {
	j := open(t, filepath.Join(t.TempDir(), journal.FileName))
	for i := 0; i < 30; i++ {
		if _, err := j.Append(context.Background(), transition(fmt.Sprintf("task/%d", i%3), "app", event.StatusNone, event.StatusPulled, i)); err != nil {
			t.Fatal(err)
		}
	}
	var seqs []uint64
	err := j.TaskRecords("task/1", func(r event.Record) error {
		if r.Task != "task/1" {
			t.Fatalf("record %d of %s returned for task/1", r.Seq, r.Task)
		}
		seqs = append(seqs, r.Seq)
		return nil
	})
	if err != nil || len(seqs) != 10 || seqs[0] != 2 || seqs[9] != 29 {
		t.Fatalf("task/1 records %v, %v; want 10 from 2 to 29", seqs, err)
	}
}

func TestFollowSeesNewRecordsWithoutPolling(t *testing.T) {
	j := open(t, filepath.Join(t.TempDir(), journal.FileName))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make(chan uint64, 10)
	go func() {
		_ = j.Follow(ctx, 1, func(r event.Record) error { got <- r.Seq; return nil })
	}()
	for i := 1; i <= 3; i++ {
		if _, err := j.Append(ctx, transition("task/a", "app", event.StatusNone, event.StatusPulled, i)); err != nil {
			t.Fatal(err)
		}
		select {
		case s := <-got:
			if s != uint64(i) {
				t.Fatalf("follow delivered %d; want %d", s, i)
			}
		case <-ctx.Done():
			t.Fatalf("follow never delivered record %d", i)
		}
	}
}

func TestSnapshotThenTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), journal.FileName)
	j := open(t, path)
	ctx := context.Background()
	for i := 1; i <= 10; i++ {
		if _, err := j.Append(ctx, transition("task/a", "app", event.StatusNone, event.StatusPulled, i)); err != nil {
			t.Fatal(err)
		}
	}
	for _, at := range []uint64{4, 7, 10} {
		rec := event.Record{Time: t0, Event: &event.SnapshotTaken{AtSeq: at, Bytes: 5}}
		if _, err := j.SaveSnapshot(ctx, at, []byte(fmt.Sprintf("state%d", at)), rec); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := j.SaveSnapshot(ctx, 99, nil, event.Record{Time: t0, Event: &event.SnapshotTaken{}}); err == nil {
		t.Fatal("a snapshot beyond the last record was accepted")
	}
	snap, skipped, err := j.SnapshotAtOrBefore(math.MaxUint64)
	if err != nil || len(skipped) != 0 || snap.AtSeq != 10 || string(snap.Data) != "state10" {
		t.Fatalf("latest snapshot %+v, %v, %v; want state10 at 10", snap, skipped, err)
	}
	if old, _, _ := j.SnapshotAtOrBefore(5); old != nil {
		t.Fatalf("snapshot at 4 should have been dropped (keep 2), found %d", old.AtSeq)
	}
	if s, _, _ := j.SnapshotAtOrBefore(8); s == nil || s.AtSeq != 7 {
		t.Fatalf("snapshot at or before 8: %+v; want the one at 7", s)
	}
	tail := collect(t, j, snap.AtSeq+1)
	// Each snapshot journaled its snapshot_taken record (11, 12, 13).
	if len(tail) != 3 || tail[0].Type() != event.TypeSnapshotTaken {
		t.Fatalf("tail after snapshot: %d records; want the 3 snapshot_taken records", len(tail))
	}
}

func TestCompactionKeepsLiveHistoryAndContinuity(t *testing.T) {
	path := filepath.Join(t.TempDir(), journal.FileName)
	j := open(t, path)
	ctx := context.Background()
	// Interleave a live task with cleaned ones, so compaction leaves scattered holes.
	for i := 0; i < 300; i++ {
		task := "task/live"
		if i%3 != 0 {
			task = fmt.Sprintf("task/old-%d", i%7)
		}
		if _, err := j.Append(ctx, transition(task, "app", event.StatusNone, event.StatusPulled, i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := j.Compact(ctx, 300, func(journal.Header) bool { return true }); err == nil {
		t.Fatal("compaction without a covering snapshot was allowed")
	}
	if _, err := j.SaveSnapshot(ctx, 300, []byte("s"), event.Record{Time: t0, Event: &event.SnapshotTaken{AtSeq: 300}}); err != nil {
		t.Fatal(err)
	}
	res, err := j.Compact(ctx, 300, func(h journal.Header) bool { return strings.HasPrefix(h.Task, "task/old-") })
	if err != nil {
		t.Fatal(err)
	}
	if res.Records != 200 {
		t.Fatalf("compaction removed %d records; want 200", res.Records)
	}
	check := func(j *journal.Journal) {
		t.Helper()
		recs := collect(t, j, 1)
		if len(recs) != 101 {
			t.Fatalf("after compaction %d records; want 100 live + 1 snapshot_taken", len(recs))
		}
		n := 0
		if err := j.TaskRecords("task/old-1", func(event.Record) error { n++; return nil }); err != nil || n != 0 {
			t.Fatalf("compacted task still indexed: %d records, %v", n, err)
		}
		v, err := j.Verify(nil)
		if err != nil || len(v.Problems) != 0 {
			t.Fatalf("verify after compaction: %v %v", v.Problems, err)
		}
		if v.Holes == 0 || v.Holes > 101 {
			t.Fatalf("holes %d; want the cuts recorded as merged ranges", v.Holes)
		}
	}
	check(j)
	j.Close()
	j = open(t, path)
	check(j)
	if j.LastSeq() != 301 {
		t.Fatalf("last seq after compaction and reopen %d; want 301", j.LastSeq())
	}
}

func TestVerifyNamesEveryDefect(t *testing.T) {
	path := filepath.Join(t.TempDir(), journal.FileName)
	j := open(t, path)
	ctx := context.Background()
	for i := 1; i <= 20; i++ {
		if _, err := j.Append(ctx, transition("task/a", "app", event.StatusNone, event.StatusPulled, i)); err != nil {
			t.Fatal(err)
		}
	}
	j.Close() // the defects are planted in the closed file, past every check an agent makes
	// Record 5: one flipped byte in the body.
	good, err := journal.EncodeRecord(event.Record{Seq: 5, Time: t0, Task: "task/a", Container: "app", Event: &event.ContainerTransitioned{From: "NONE", To: "PULLED"}})
	if err != nil {
		t.Fatal(err)
	}
	flipped := append([]byte(nil), good...)
	flipped[len(flipped)/2] ^= 0x40
	v, _ := journal.EncodeRecord(event.Record{Seq: 15, Time: t0, Task: "task/a", Event: &event.TaskCleaned{}})
	v18, _ := journal.EncodeRecord(event.Record{Seq: 18, Time: t0, Task: "task/a", Event: &event.TaskCleaned{}})
	defects := []struct {
		seq   uint64
		value []byte // nil: the record deleted
	}{
		{5, flipped},
		{9, nil},                 // deleted without a compaction cut
		{12, good[:len(good)-7]}, // truncated
		{15, withType(v, 100)},   // an unknown record type with a valid checksum
		{17, v18},                // holds sequence number 18
	}
	for _, p := range defects {
		plant := journaltest.PutRecord
		if p.value == nil {
			plant = func(path string, seq uint64, _ []byte) error { return journaltest.DeleteRecord(path, seq) }
		}
		if err := plant(path, p.seq, p.value); err != nil {
			t.Fatal(err)
		}
	}
	j = open(t, path)
	res, err := j.Verify(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[uint64]string{5: "checksum mismatch", 9: "sequence gap", 12: "checksum mismatch", 15: "unknown record type 100", 17: "holds sequence 18"}
	for seq, what := range want {
		found := false
		for _, p := range res.Problems {
			if (p.Seq == seq || (seq == 9 && p.Seq == 10)) && strings.Contains(p.String(), what) {
				found = true
			}
		}
		if !found {
			t.Errorf("verify did not report record %d: %q; problems: %v", seq, what, res.Problems)
		}
	}
	if err := j.Iterate(1, func(event.Record) error { return nil }); err == nil || !strings.Contains(err.Error(), "record 5") {
		t.Fatalf("iterate over a corrupt record: %v; want an error naming record 5", err)
	}
}

// TestARecordKeyOfTheWrongLengthIsNamedNeverAPanic: a key that is no sequence number (damage
// no agent writes; once seen read through a FUSE mount's stale page) is named by every reader
// — the first key for the search by time, the range and compaction, the last for the open —
// where reading it as 8 bytes panicked.
func TestARecordKeyOfTheWrongLengthIsNamedNeverAPanic(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		key  []byte // 5 zero bytes sort before every record, 5 0xff bytes after, 9 bytes between two
		read func(*journal.Journal) error
	}{
		{"seq at", []byte{0, 0, 0, 0, 0}, func(j *journal.Journal) error { _, err := j.SeqAt(t0.Add(time.Hour)); return err }},
		{"range", []byte{0, 0, 0, 0, 0}, func(j *journal.Journal) error { _, _, err := j.Range(); return err }},
		{"compact", []byte{0, 0, 0, 0, 0, 0, 0, 5, 0}, func(j *journal.Journal) error {
			if _, err := j.SaveSnapshot(ctx, 10, []byte("{}"), event.Record{Time: t0, Event: &event.SnapshotTaken{AtSeq: 10, Bytes: 2}}); err != nil {
				return err
			}
			_, err := j.Compact(ctx, 10, func(journal.Header) bool { return false }) // kept: it walks on to the key
			return err
		}},
		{"open", []byte{0xff, 0xff, 0xff, 0xff, 0xff}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), journal.FileName)
			j := open(t, path)
			for i := 1; i <= 10; i++ {
				if _, err := j.Append(ctx, transition("task/a", "app", event.StatusNone, event.StatusPulled, i)); err != nil {
					t.Fatal(err)
				}
			}
			j.Close()
			if err := journaltest.PutKey(path, tc.key, []byte("not a record")); err != nil {
				t.Fatal(err)
			}
			j, err := journal.Open(path, journal.Options{})
			if tc.read == nil {
				if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("record key %x: want 8 bytes", tc.key)) {
					t.Fatalf("open: %v; want the key named", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer j.Close()
			if err := tc.read(j); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("record key %x: want 8 bytes", tc.key)) {
				t.Fatalf("%s: %v; want the key named", tc.name, err)
			}
		})
	}
}

// withType rewrites the type of an encoded record and fixes its checksum, leaving everything
// else intact: a record a newer agentd might write.
func withType(v []byte, typ byte) []byte {
	out := append([]byte(nil), v[:len(v)-4]...)
	// version, seq (1 byte for small seqs), time (varint), then type.
	_, n := binary.Varint(out[2:])
	out[2+n] = typ
	return binary.BigEndian.AppendUint32(out, crc32c(out))
}

func TestNewerSchemaIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), journal.FileName)
	j, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	j.Close()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("meta")).Put([]byte("schema"), binary.BigEndian.AppendUint32(nil, journal.SchemaVersion+1))
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	_, err = journal.Open(path, journal.Options{})
	newer := fmt.Sprintf("schema %d", journal.SchemaVersion+1)
	if err == nil || !strings.Contains(err.Error(), newer) || !strings.Contains(err.Error(), path) {
		t.Fatalf("open of a newer schema: %v; want a refusal naming %s and the file", err, newer)
	}
}

func TestSecondOpenSaysWhoHoldsTheLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), journal.FileName)
	open(t, path)
	start := time.Now()
	_, err := journal.Open(path, journal.Options{ReadOnly: true, Timeout: 100 * time.Millisecond})
	if !errors.Is(err, journal.ErrLocked) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Fatalf("second open: %v; want ErrLocked naming pid %d", err, os.Getpid())
	}
	if time.Since(start) > 30*time.Second {
		t.Fatal("second open hung instead of timing out")
	}
}

func TestReadOnlyOpenOfMissingFileFails(t *testing.T) {
	_, err := journal.Open(filepath.Join(t.TempDir(), "nope", journal.FileName), journal.Options{ReadOnly: true})
	if err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("read-only open of a missing file: %v", err)
	}
}

func TestLargeSnapshotsAreChunkedAndChecked(t *testing.T) {
	path := filepath.Join(t.TempDir(), journal.FileName)
	j := open(t, path)
	ctx := context.Background()
	if _, err := j.Append(ctx, transition("task/a", "app", event.StatusNone, event.StatusPulled, 1)); err != nil {
		t.Fatal(err)
	}
	// 320 KB that do not compress: stored, still about 160 chunks.
	big := make([]byte, 320000)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range big {
		big[i] = byte(rng.Uint32())
	}
	if _, err := j.SaveSnapshot(ctx, 1, big, event.Record{Time: t0, Event: &event.SnapshotTaken{AtSeq: 1}}); err != nil {
		t.Fatal(err)
	}
	snap, skipped, err := j.SnapshotAtOrBefore(math.MaxUint64)
	if err != nil || len(skipped) != 0 || string(snap.Data) != string(big) {
		t.Fatalf("large snapshot read back: %v %v (%d bytes)", skipped, err, len(snap.Data))
	}
	// Damage one chunk in the middle: the snapshot is refused by its checksum, not misread.
	if err := j.DB().Update(func(tx *bolt.Tx) error {
		k := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint64(nil, 1), 4)
		v := append([]byte(nil), tx.Bucket([]byte("snapshots")).Get(k)...)
		v[100] ^= 1
		return tx.Bucket([]byte("snapshots")).Put(k, v)
	}); err != nil {
		t.Fatal(err)
	}
	if snap, skipped, _ := j.SnapshotAtOrBefore(math.MaxUint64); snap != nil || len(skipped) != 1 {
		t.Fatalf("a damaged snapshot was used: %v, skipped %v", snap != nil, skipped)
	}
	if res, _ := j.Verify(nil); len(res.Problems) != 1 || res.Problems[0].Seq != 1 {
		t.Fatalf("verify: %v", res.Problems)
	}
}

// NotifyAt wakes a reader waiting for many records once, when the last of them is durable,
// not at each commit before; withdrawn, it is never closed; Close releases every waiter.
func TestNotifyAtClosesOnceTheRecordIsDurable(t *testing.T) {
	j, err := journal.Open(filepath.Join(t.TempDir(), journal.FileName), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	ctx := context.Background()
	at3, _ := j.NotifyAt(3)
	gone, withdraw := j.NotifyAt(2)
	withdraw()
	atEnd, _ := j.NotifyAt(100)
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	for i := 1; i <= 2; i++ {
		if _, err := j.Append(ctx, transition("task/a", "app", event.StatusNone, event.StatusPulled, i)); err != nil {
			t.Fatal(err)
		}
		if closed(at3) {
			t.Fatalf("NotifyAt(3) closed with record %d durable", i)
		}
	}
	if closed(gone) {
		t.Fatal("a withdrawn NotifyAt(2) was closed")
	}
	if _, err := j.Append(ctx, transition("task/a", "app", event.StatusNone, event.StatusPulled, 3)); err != nil {
		t.Fatal(err)
	}
	if !closed(at3) { // closed by the commit, before Append returns
		t.Fatal("NotifyAt(3) still open with record 3 durable")
	}
	if now, _ := j.NotifyAt(1); !closed(now) {
		t.Fatal("NotifyAt of a durable record is not closed at once")
	}
	j.Close()
	if !closed(atEnd) {
		t.Fatal("NotifyAt(100) still open after Close")
	}
}
