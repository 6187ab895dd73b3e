package otlpship

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	"google.golang.org/protobuf/proto"

	"github.com/agentd/agentd/internal/event"
)

// The shipper encodes requests by hand from the stored records (encode.go); what it sends must
// be, byte for byte, the request of LogRecords that proto.Marshal makes: every record type, the
// WARN rules, clipped and invalid UTF-8 fields, gaps, and an event body met before (its encoded
// part reused) as well as a new one.
func TestEncodedRecordsAreLogRecordsMarshalled(t *testing.T) {
	j := openJournal(t, "")
	var recs []event.Record
	for i, typ := range event.Types() { // every type, zero-valued
		ev, err := event.UnmarshalBody(typ, []byte("{}"))
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, event.Record{Time: t0.Add(time.Duration(i) * time.Second), Task: "arn:t", Container: "web", Event: ev})
	}
	long := strings.Repeat("é", maxField) // clipped: more than maxField bytes
	recs = append(recs,
		event.Record{Time: t0, Task: "arn:t", Container: "web", Event: &event.ContainerTransitioned{From: event.StatusRunning, To: event.StatusStopped, ExitCode: intp(137), Reason: `killed "hard" =x`}},
		event.Record{Time: t0, Task: "arn:t", Container: "web", Event: &event.ContainerTransitioned{From: event.StatusRunning, To: event.StatusStopped, ExitCode: intp(0), Reason: "stopped by agentd: stopped by the control plane"}},
		event.Record{Time: t0, Task: "arn:\xff\xfe-bad", Container: "w\xc3", Event: &event.TaskTransitioned{From: event.StatusRunning, To: event.StatusStopped, Reason: "bad \xff utf-8"}},
		event.Record{Time: t0, Task: long, Container: long, Event: &event.CallEnded{Call: "start", Reason: long}},
		event.Record{Time: t0, Event: &event.PayloadReceived{MessageID: "m-1"}},
		event.Record{Time: t0, Task: "arn:t q", Event: &event.TaskCleaned{}},
		event.Record{Time: t0, Task: `arn:t"q`, Container: `w\b`, Event: &event.CleanupStarted{}}, // a subject quoted in the body
		event.Record{Time: t0, Task: "arn:t", Event: &event.StoppedAcked{ChangeID: "c-9", Rejected: "no"}},
		event.Record{Time: time.Unix(0, 1).UTC(), Task: "arn:t", Container: "web", Event: &event.ImageRemoved{Digest: "sha256:ab", Reason: "unused"}},
	)
	recs = append(recs, recs...) // every body met a second time
	if _, err := j.Append(context.Background(), recs...); err != nil {
		t.Fatal(err)
	}
	now := t0.Add(time.Hour)
	s, err := New(j, Config{Endpoint: Endpoint{URL: "http://127.0.0.1:1/v1/logs"}, AgentID: "a", Version: "1.2.3", HostName: "h",
		Resource: map[string]string{"k": "v"}, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	s.pending = &[2]uint64{1, 3} // a refused batch's gap leads
	const from = 3
	wantRecs := []*logspb.LogRecord{GapRecord(1, 3, "refused by the OTLP endpoint", now)}
	if err := j.Iterate(from+1, func(r event.Record) error {
		wantRecs = append(wantRecs, LogRecord(r, now))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want, err := proto.Marshal(s.request(wantRecs))
	if err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 2; round++ { // the second with every event part known
		b, err := s.read(from)
		if err != nil {
			t.Fatal(err)
		}
		if b.n != len(wantRecs) || b.journalN != len(recs)-from || b.last != uint64(len(recs)) {
			t.Fatalf("round %d: batch of %d records (%d of the journal) through %d, want %d (%d) through %d", round, b.n, b.journalN, b.last, len(wantRecs), len(recs)-from, len(recs))
		}
		if !bytes.Equal(b.body.buf, want) {
			t.Fatalf("round %d: the encoded request (%d bytes) differs from proto.Marshal's (%d bytes)", round, len(b.body.buf), len(want))
		}
	}
}

// A body shared by every record is decoded once, and a batch allocates a handful of buffers,
// not objects for every record: the shipper's CPU is the appenders' on a small host.
func TestEncodingABatchAllocatesPerBatchNotPerRecord(t *testing.T) {
	j := openJournal(t, "")
	recs := make([]event.Record, MaxBatchRecords)
	for i := range recs {
		recs[i] = event.Record{Time: t0, Task: "arn:agentd:task/web-1", Container: "app", Event: &event.ContainerTransitioned{From: event.StatusCreated, To: event.StatusRunning}}
	}
	if _, err := j.Append(context.Background(), recs...); err != nil {
		t.Fatal(err)
	}
	s, err := New(j, Config{Endpoint: Endpoint{URL: "http://127.0.0.1:1/v1/logs"}, AgentID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(5, func() {
		if b, err := s.read(0); err != nil || b.journalN != MaxBatchRecords {
			t.Fatalf("read: %v, %d records", err, b.journalN)
		}
	})
	if allocs > 64 {
		t.Fatalf("%.0f allocations to build a batch of %d records, want at most 64", allocs, MaxBatchRecords)
	}
}
