package fsm_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/fsm"
)

// A snapshot is written an entry at a time: the encoding hands over no piece larger than one
// task, tombstone, message or change (or the state around its tables), so making it never
// holds the whole — 25 MB for 20,000 live tasks, half the agent's live heap at the peak of a
// burst (issue 25) — and the bytes are exactly json.Marshal's of the whole snapshot, so
// snapshots of this build and the last are the same.
func TestASnapshotIsWrittenAnEntryAtATime(t *testing.T) {
	st, err := fsm.Restore([]byte(v1Snapshot)) // tombstones and messages
	if err != nil {
		t.Fatal(err)
	}
	now := st.LastTime
	for i := range 60 { // live tasks, and unsent changes numbered across 99 → 100
		task := fmt.Sprintf(`{"arn":"task/live-%02d","desired_status":"RUNNING","containers":[{"name":"app","image":"x","command":["serve"]}]}`, i)
		if i%3 == 0 {
			task = fmt.Sprintf(`{"arn":"task/refused-%02d","desired_status":"RUNNING","containers":[]}`, i)
		}
		now = now.Add(time.Second)
		for _, r := range st.Step(now, fsm.PayloadArrived{MessageID: fmt.Sprintf("m-%03d", i), Tasks: []json.RawMessage{json.RawMessage(task)}}).Records {
			r.Seq, r.Time = st.LastSeq+1, now
			if err := st.Apply(r); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(st.Tasks) < 40 || st.OutboxLen() < 10 || st.LastSeq < 100 {
		t.Fatalf("the projection is too small to tell: %s", st)
	}
	want, err := json.Marshal(struct {
		Version int        `json:"version"`
		State   *fsm.State `json:"state"`
	}{3, st})
	if err != nil {
		t.Fatal(err)
	}
	// A tombstone is held packed; the snapshot holds its fields.
	packed, _ := json.Marshal(st.Tombstones)
	unpacked, _ := json.Marshal(fsm.UnpackedTombstones(st))
	want = bytes.Replace(want, packed, unpacked, 1)
	largest := 0
	for _, v := range []any{st.Tasks, fsm.UnpackedTombstones(st), st.Messages, st.Outbox} {
		var entries map[string]json.RawMessage
		b, _ := json.Marshal(v)
		if err := json.Unmarshal(b, &entries); err != nil {
			t.Fatal(err)
		}
		for k, e := range entries {
			largest = max(largest, len(k)+len(e)+4)
		}
	}
	head := *st
	head.Tasks, head.Tombstones, head.Messages, head.Outbox = nil, nil, nil, nil
	around, _ := json.Marshal(&head)
	largest = max(largest, len(around))

	var got []byte
	biggest := 0
	n, err := st.WriteSnapshot(func(p []byte) error {
		got, biggest = append(got, p...), max(biggest, len(p))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) || n != int64(len(want)) {
		t.Fatalf("written (%d bytes, said %d):\n%s\nwant json.Marshal's:\n%s", len(got), n, got, want)
	}
	if biggest > largest {
		t.Errorf("a piece of %d bytes was handed over at once, of %d in all: more than an entry (%d)", biggest, len(want), largest)
	}
	if again, _ := st.Snapshot(); !bytes.Equal(again, want) {
		t.Errorf("Snapshot differs from WriteSnapshot")
	}
	if _, err := fsm.Restore(got); err != nil {
		t.Errorf("the written snapshot is not restored: %v", err)
	}
}
