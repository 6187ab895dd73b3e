package journal_test

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/journal"
)

// FuzzDecodeRecord feeds arbitrary bytes to the record decoder: it must return a record or an
// error, never panic, and whatever it accepts must re-encode to the very same bytes.
func FuzzDecodeRecord(f *testing.F) {
	code := 143
	seeds := []event.Record{
		{Seq: 1, Time: t0, Event: &event.AgentStarted{Version: "dev", PID: 42, AgentID: "agent-1", JournalID: "00ff"}},
		{Seq: 2, Time: t0, Task: "task/7f3a", Event: &event.TaskAdded{MessageID: "m-1", Desired: event.StatusRunning, Containers: []event.ContainerSpec{{Name: "app", Image: "web:3", Command: []string{"run"}, Env: map[string]string{"A": "1"}, Essential: true}}}},
		{Seq: 3, Time: t0.Add(time.Second), Task: "task/7f3a", Container: "app", Event: &event.ContainerTransitioned{From: "RUNNING", To: "STOPPED", ExitCode: &code, Reason: "stopped"}},
		{Seq: 4, Time: t0, Event: &event.ChangesSettled{Accepted: []string{"c-1"}, Rejected: []event.Rejection{{ID: "c-2", Error: "unknown_task"}}}},
	}
	for _, r := range seeds {
		b, err := journal.EncodeRecord(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(r.Seq, b)
	}
	f.Add(uint64(9), []byte{1, 9})
	f.Fuzz(func(t *testing.T, seq uint64, value []byte) {
		rec, err := journal.DecodeRecord(binary.BigEndian.AppendUint64(nil, seq), value)
		if err != nil {
			return
		}
		again, err := journal.EncodeRecord(rec)
		if err != nil {
			t.Fatalf("decoded record %d does not re-encode: %v", seq, err)
		}
		if _, err := journal.DecodeRecord(binary.BigEndian.AppendUint64(nil, seq), again); err != nil {
			t.Fatalf("re-encoded record %d does not decode: %v", seq, err)
		}
	})
}
