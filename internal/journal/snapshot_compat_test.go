package journal_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/journal"
)

// oldJournal is a copy of testdata/journal-uncompressed-snapshots.db.gz: a journal the build
// before compressed snapshots (b35120b, `agentd run --runtime sim`, AGENTD_SNAPSHOT_EVERY=30)
// wrote for six tasks run and cleaned and three left running with two containers each, then
// stopped by SIGTERM. Its snapshots, at records 96 and 137, are JSON as they were stored.
func oldJournal(t *testing.T) *journal.Journal {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "journal-uncompressed-snapshots.db.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), journal.FileName)
	out, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, zr); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	j, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

// fullReplay is the projection rebuilt from the first record, no snapshot read.
func fullReplay(t *testing.T, j *journal.Journal) *fsm.State {
	t.Helper()
	st := fsm.New()
	if err := j.IterateRange(1, j.LastSeq(), st.Apply); err != nil {
		t.Fatal(err)
	}
	return st
}

// withoutMessageIDs is st's snapshot without the ids of payloads it remembers, and those ids.
// Where a payload's id is kept moved in issue 41 — from the table into the tombstone of a task
// it held, when that task is cleaned — so a projection loaded from an older build's snapshot
// holds in its table the ids a full replay holds in its tombstones; the rest is the same.
func withoutMessageIDs(t *testing.T, st *fsm.State) (string, []string) {
	t.Helper()
	b, err := st.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var snap struct {
		Version int            `json:"version"`
		State   map[string]any `json:"state"`
	}
	if err := json.Unmarshal(b, &snap); err != nil {
		t.Fatal(err)
	}
	delete(snap.State, "messages")
	for _, ts := range snap.State["tombstones"].(map[string]any) {
		delete(ts.(map[string]any), "messages")
	}
	out, _ := json.Marshal(snap)
	return string(out), st.RememberedMessages()
}

// loadFrom rebuilds the projection as recovery does — the newest sound snapshot, then the
// records after it — and checks it started from the snapshot at want, having skipped
// skipped damaged ones, and rebuilt exactly what a full replay does.
func loadFrom(t *testing.T, j *journal.Journal, want uint64, skipped int, full *fsm.State) *fsm.State {
	t.Helper()
	snap, passed, err := j.SnapshotAtOrBefore(math.MaxUint64)
	if err != nil || len(passed) != skipped || snap == nil || snap.AtSeq != want {
		t.Fatalf("newest sound snapshot: %v at %d (want %d), skipped %v (want %d)", err, snapAt(snap), want, passed, skipped)
	}
	st, err := fsm.Restore(snap.Data)
	if err != nil {
		t.Fatalf("restore the snapshot at %d: %v", want, err)
	}
	if err := j.IterateRange(st.LastSeq+1, j.LastSeq(), st.Apply); err != nil {
		t.Fatal(err)
	}
	got, gotIDs := withoutMessageIDs(t, st)
	replayed, replayedIDs := withoutMessageIDs(t, full)
	if got != replayed {
		t.Fatalf("the projection loaded from the snapshot at %d differs from a full replay", want)
	}
	// The older build's snapshot keeps ids in the table, which compaction forgets a retention
	// after their payload came; a full replay keeps them with their tombstones: never fewer.
	for _, id := range gotIDs {
		if !slices.Contains(replayedIDs, id) {
			t.Fatalf("the projection loaded from the snapshot at %d remembers payload %s, a full replay does not", want, id)
		}
	}
	t.Logf("loaded from the snapshot at %d: %d payload ids remembered, a full replay %d", want, len(gotIDs), len(replayedIDs))
	return st
}

func snapAt(s *journal.Snapshot) uint64 {
	if s == nil {
		return 0
	}
	return s.AtSeq
}

// storedSnapshot is the first chunk of the snapshot at seq as the file holds it, past its
// 12-byte header (checksum and length).
func storedSnapshot(t *testing.T, j *journal.Journal, seq uint64) []byte {
	t.Helper()
	var v []byte
	if err := j.DB().View(func(tx *bolt.Tx) error {
		k := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint64(nil, seq), 0)
		v = append(v, tx.Bucket([]byte("snapshots")).Get(k)...)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(v) < 12 {
		t.Fatalf("no snapshot stored at %d", seq)
	}
	return v[12:]
}

// An upgraded agent reads the snapshots the build before compression stored, writes its own
// compressed, and falls back from a damaged new one to an old one: issue 25 changed how
// snapshots are stored, and a host's journal outlives the upgrade.
func TestSnapshotsStoredBeforeCompressionAreStillRead(t *testing.T) {
	j := oldJournal(t)
	full := fullReplay(t, j)
	if seqs, _ := j.SnapshotSeqs(); len(seqs) != 2 || seqs[1] != 137 {
		t.Fatalf("the old journal holds snapshots at %v, want [96 137]", seqs)
	}
	if old := storedSnapshot(t, j, 137); old[0] != '{' {
		t.Fatalf("the old journal's snapshot is not stored as JSON: % x", old[:8])
	}
	st := loadFrom(t, j, 137, 0, full)
	if len(st.Tasks) != 3 || len(st.Tombstones) != 6 {
		t.Fatalf("the old journal loads %d live tasks and %d tombstones, want 3 and 6", len(st.Tasks), len(st.Tombstones))
	}
	data, err := st.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	at := j.LastSeq()
	if _, err := j.SaveSnapshot(context.Background(), at, data, event.Record{Time: time.Now().UTC(), Event: &event.SnapshotTaken{AtSeq: at, Bytes: len(data)}}); err != nil {
		t.Fatal(err)
	}
	if stored := storedSnapshot(t, j, at); stored[0] == '{' || len(stored) >= len(data)/2 {
		t.Fatalf("this build stored its snapshot as %d bytes for %d (first byte %q): not compressed", len(stored), len(data), stored[0])
	}
	full = fullReplay(t, j) // the snapshot_taken record is a record too
	loadFrom(t, j, at, 0, full)
	if res, err := j.Verify(nil); err != nil || len(res.Problems) != 0 {
		t.Fatalf("verify after the compressed snapshot: %v %v", err, res.Problems)
	}

	// The new snapshot damaged: recovery falls back to the old build's.
	if err := j.DamageSnapshot(at); err != nil {
		t.Fatal(err)
	}
	loadFrom(t, j, 137, 1, full)
}

// A snapshot packed as it is handed over, piece by piece (the engine's way: the whole is
// never held), is stored and read back as the very bytes handed over, also when a second is
// packed after it with the same encoder.
func TestASnapshotPackedPieceByPieceIsReadBackWhole(t *testing.T) {
	j := open(t, filepath.Join(t.TempDir(), journal.FileName))
	ctx := context.Background()
	for round := range 2 {
		var want []byte
		packed, n, err := journal.PackSnapshot(func(put func([]byte) error) (int64, error) {
			var n int64
			for i := range 5000 {
				p := fmt.Appendf(nil, `{"round":%d,"piece":%d},`, round, i)
				want = append(want, p...)
				if err := put(p); err != nil {
					return n, err
				}
				n += int64(len(p))
			}
			return n, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if n != int64(len(want)) || len(packed) >= len(want)/4 {
			t.Fatalf("packed %d bytes (said %d) into %d: not compressed", len(want), n, len(packed))
		}
		at := j.LastSeq() + 1
		if _, err := j.AppendPackedSnapshot(ctx, at, packed, transition("task/a", "app", event.StatusNone, event.StatusPulled, int(at))); err != nil {
			t.Fatal(err)
		}
		snap, skipped, err := j.SnapshotAtOrBefore(math.MaxUint64)
		if err != nil || len(skipped) > 0 || snap == nil || snap.AtSeq != at {
			t.Fatalf("snapshot at %d not read back: %v %v %+v", at, err, skipped, snap)
		}
		if !bytes.Equal(snap.Data, want) {
			t.Fatalf("round %d: read back %d bytes, want the %d handed over", round, len(snap.Data), len(want))
		}
	}
}
