package otlpship

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/journal"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func openJournal(t *testing.T, path string) *journal.Journal {
	t.Helper()
	if path == "" {
		path = filepath.Join(t.TempDir(), journal.FileName)
	}
	j, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

// appendTransitions journals n container transitions of task arn (RUNNING → STOPPED exit i%3).
func appendTransitions(t *testing.T, j *journal.Journal, arn string, n int, reason string) {
	t.Helper()
	recs := make([]event.Record, n)
	for i := range recs {
		code := i % 3
		recs[i] = event.Record{Time: t0.Add(time.Duration(i) * time.Millisecond), Task: arn, Container: "web",
			Event: &event.ContainerTransitioned{From: event.StatusRunning, To: event.StatusStopped, ExitCode: &code, Reason: reason}}
	}
	if _, err := j.Append(context.Background(), recs...); err != nil {
		t.Fatal(err)
	}
}

type running struct {
	s    *Shipper
	stop func()
}

func ship(t *testing.T, j *journal.Journal, ep Endpoint, tweak func(*Config)) running {
	t.Helper()
	cfg := Config{Endpoint: ep, AgentID: "agent-7", Version: "1.2.3", HostName: "host-a",
		Resource:   map[string]string{"deployment.environment": "test", "service.name": "not-agentd"},
		MinBackoff: 5 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, PersistEvery: -1, Linger: -1, CPUShare: 1, Log: zerolog.Nop()}
	if tweak != nil {
		tweak(&cfg)
	}
	s, err := New(j, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	stop := func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("shipper: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("shipper did not stop within 30 s of its context ending")
		}
	}
	t.Cleanup(func() {
		if ctx.Err() == nil {
			stop()
		}
	})
	return running{s: s, stop: stop}
}

// settled waits (bounded) until the shipper's position reaches seq.
func (r running) settled(t *testing.T, seq uint64) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for r.s.Stats().Position < seq {
		if time.Now().After(deadline) {
			t.Fatalf("shipping position %d after 60 s, want %d", r.s.Stats().Position, seq)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func wantSeqs(from, to uint64) []uint64 {
	var out []uint64
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

func TestShipsEveryRecordInOrderInBatchesWithTheResource(t *testing.T) {
	j := openJournal(t, "")
	appendTransitions(t, j, "arn:task/1", 1200, "")
	rcv := newReceiver(t, nil)
	ep := rcv.endpoint()
	ep.Headers = map[string]string{"X-Api-Key": "k-123"}
	ship(t, j, ep, nil)
	rcv.waitFor("1200 records", func() bool { return len(rcv.accepted()) >= 1200 })

	if got := seqsOf(rcv.accepted()); !slices.Equal(got, wantSeqs(1, 1200)) {
		t.Fatalf("agentd.seq of what arrived: %v…, want 1..1200 in order, once", got[:min(10, len(got))])
	}
	for i, q := range rcv.all() {
		if n := len(records(q.req)); n > MaxBatchRecords {
			t.Errorf("request %d carried %d records, more than %d", i, n, MaxBatchRecords)
		}
		if ct := q.header.Get("Content-Type"); ct != "application/x-protobuf" {
			t.Errorf("request %d: Content-Type %q", i, ct)
		}
		if k := q.header.Get("X-Api-Key"); k != "k-123" {
			t.Errorf("request %d: header from OTEL_EXPORTER_OTLP_HEADERS missing (X-Api-Key=%q)", i, k)
		}
		rl := q.req.ResourceLogs[0]
		res := rl.Resource.Attributes
		for k, want := range map[string]string{"service.name": "agentd", "service.version": "1.2.3", "service.instance.id": "agent-7", "host.name": "host-a", "deployment.environment": "test"} {
			if got := attrStr(res, k); got != want {
				t.Errorf("request %d: resource %s = %q, want %q", i, k, got, want)
			}
		}
		if name := rl.ScopeLogs[0].Scope.GetName(); name != ScopeName {
			t.Errorf("request %d: scope %q, want %q", i, name, ScopeName)
		}
	}
	if n := len(rcv.all()); n < 3 {
		t.Errorf("1200 records arrived in %d requests: batches are not bounded by %d", n, MaxBatchRecords)
	}
}

func TestBatchesStayUnderOneMebibyte(t *testing.T) {
	j := openJournal(t, "")
	appendTransitions(t, j, "arn:task/big", 300, strings.Repeat("r", 12<<10)) // ~12 KiB a record: 3.6 MiB in all
	rcv := newReceiver(t, nil)
	ship(t, j, rcv.endpoint(), nil)
	rcv.waitFor("300 records", func() bool { return len(rcv.accepted()) >= 300 })
	for i, q := range rcv.all() {
		if len(q.raw) > MaxBatchBytes {
			t.Errorf("request %d is %d bytes, over %d", i, len(q.raw), MaxBatchBytes)
		}
	}
	if got := seqsOf(rcv.accepted()); !slices.Equal(got, wantSeqs(1, 300)) {
		t.Fatalf("records out of order or lost across size-bounded batches")
	}
}

func TestRetryAfterIsAFloor(t *testing.T) {
	j := openJournal(t, "")
	appendTransitions(t, j, "arn:task/1", 5, "")
	rcv := newReceiver(t, func(n int, w http.ResponseWriter) bool {
		if n == 0 {
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusTooManyRequests)
			return true
		}
		return false
	})
	r := ship(t, j, rcv.endpoint(), nil) // backoff alone would retry after 5 ms
	rcv.waitFor("the retry", func() bool { return len(rcv.accepted()) >= 5 })
	reqs := rcv.all()
	if gap := reqs[1].at.Sub(reqs[0].at); gap < 2*time.Second {
		t.Fatalf("retried %v after a 429 with Retry-After: 2; it must wait at least 2 s", gap)
	}
	r.settled(t, 5)
	if st := r.s.Stats(); st.Retried < 1 || st.Shipped != 5 {
		t.Fatalf("stats %+v: want 1+ retried, 5 shipped", st)
	}
}

func TestServerErrorsAndBrokenConnectionsAreRetried(t *testing.T) {
	j := openJournal(t, "")
	appendTransitions(t, j, "arn:task/1", 20, "")
	rcv := newReceiver(t, func(n int, w http.ResponseWriter) bool {
		switch n {
		case 0:
			w.WriteHeader(http.StatusInternalServerError)
			return true
		case 1: // a connection cut mid-answer
			hj, _ := w.(http.Hijacker)
			c, _, _ := hj.Hijack()
			c.Close()
			return true
		case 2:
			w.WriteHeader(http.StatusServiceUnavailable)
			return true
		}
		return false
	})
	ship(t, j, rcv.endpoint(), nil)
	rcv.waitFor("20 records", func() bool { return len(rcv.accepted()) >= 20 })
	if got := seqsOf(rcv.accepted()); !slices.Equal(got, wantSeqs(1, 20)) {
		t.Fatalf("after 500, a cut connection and 503: %v, want 1..20 once", got)
	}
}

func TestRefusedBatchIsDroppedAndAnnouncedAsAGap(t *testing.T) {
	j := openJournal(t, "")
	appendTransitions(t, j, "arn:task/1", 600, "") // two batches: 1..512 refused, 513..600
	rcv := newReceiver(t, func(n int, w http.ResponseWriter) bool {
		if n == 0 {
			w.WriteHeader(http.StatusBadRequest)
			return true
		}
		return false
	})
	r := ship(t, j, rcv.endpoint(), nil)
	rcv.waitFor("the rest", func() bool { return len(rcv.accepted()) >= 89 })
	got := rcv.accepted()
	if attrStr(got[0].Attributes, AttrType) != GapType {
		t.Fatalf("first accepted record is %v, want the gap of the refused batch", got[0])
	}
	from, _ := attr(got[0].Attributes, AttrSeqFrom)
	to, _ := attr(got[0].Attributes, AttrSeqTo)
	if from.GetIntValue() != 1 || to.GetIntValue() != 512 || got[0].SeverityText != "WARN" {
		t.Fatalf("gap %d..%d severity %s, want 1..512 WARN", from.GetIntValue(), to.GetIntValue(), got[0].SeverityText)
	}
	if seqs := seqsOf(got[1:]); !slices.Equal(seqs, wantSeqs(513, 600)) {
		t.Fatalf("after the gap: %v…, want 513..600", seqs[:min(5, len(seqs))])
	}
	r.settled(t, 600)
	if st := r.s.Stats(); st.Dropped != 512 || st.Gaps != 1 || st.Shipped != 88 {
		t.Fatalf("stats %+v: want 512 dropped, 1 gap", st)
	}
}

func TestRestartResumesAtTheShippingPosition(t *testing.T) {
	path := filepath.Join(t.TempDir(), journal.FileName)
	j := openJournal(t, path)
	appendTransitions(t, j, "arn:task/1", 30, "")
	rcv := newReceiver(t, nil)
	first := ship(t, j, rcv.endpoint(), func(c *Config) { c.PersistEvery = time.Hour }) // only the final save
	first.settled(t, 30)
	first.stop()
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}

	j2 := openJournal(t, path)
	appendTransitions(t, j2, "arn:task/2", 10, "")
	ship(t, j2, rcv.endpoint(), nil)
	rcv.waitFor("40 records", func() bool { return len(rcv.accepted()) >= 40 })
	if got := seqsOf(rcv.accepted()); !slices.Equal(got, wantSeqs(1, 40)) {
		t.Fatalf("across a restart: %v, want 1..40 each once (the second run resumes at 31)", got)
	}
}

func TestCompactionBeforeShippingIsOneGapExactlyOnce(t *testing.T) {
	j := openJournal(t, "")
	ctx := context.Background()
	appendTransitions(t, j, "arn:task/old", 2, "")
	// The endpoint is down (503): the shipper holds its batch of records 1..2 and retries,
	// while records 3..10 are committed and compaction removes 3..6 and 8 before they are read.
	up := make(chan struct{})
	rcv := newReceiver(t, func(n int, w http.ResponseWriter) bool {
		select {
		case <-up:
			return false
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
			return true
		}
	})
	r := ship(t, j, rcv.endpoint(), nil)
	rcv.waitFor("a refused attempt", func() bool { return len(rcv.all()) >= 1 })
	appendTransitions(t, j, "arn:task/old", 8, "")
	if _, err := j.SaveSnapshot(ctx, 10, []byte("{}"), event.Record{Time: t0, Event: &event.SnapshotTaken{AtSeq: 10}}); err != nil {
		t.Fatal(err)
	}
	res, err := j.Compact(ctx, 10, func(h journal.Header) bool { return (h.Seq >= 3 && h.Seq <= 6) || h.Seq == 8 })
	if err != nil || res.Records != 5 {
		t.Fatalf("compact: %+v %v", res, err)
	}
	close(up)
	r.settled(t, 11)
	var gaps [][2]int64
	var seqs []uint64
	for _, lr := range rcv.accepted() {
		if attrStr(lr.Attributes, AttrType) == GapType {
			f, _ := attr(lr.Attributes, AttrSeqFrom)
			to, _ := attr(lr.Attributes, AttrSeqTo)
			gaps = append(gaps, [2]int64{f.GetIntValue(), to.GetIntValue()})
			if lr.SeverityText != "WARN" {
				t.Errorf("gap severity %s, want WARN", lr.SeverityText)
			}
			continue
		}
		seqs = append(seqs, seqsOf([]*logspb.LogRecord{lr})[0])
	}
	if want := [][2]int64{{3, 6}, {8, 8}}; !slices.Equal(gaps, want) {
		t.Fatalf("gaps %v, want %v: exactly what compaction removed, once", gaps, want)
	}
	if want := []uint64{1, 2, 7, 9, 10, 11}; !slices.Equal(seqs, want) {
		t.Fatalf("records %v, want %v: nothing else lost", seqs, want)
	}
}

func TestSealedValuesAreNeverShipped(t *testing.T) {
	const secret = "hunter2-s3cr3t"
	j := openJournal(t, "")
	task := event.ContainerSpec{Name: "db", Image: "postgres", Env: map[string]string{"PASSWORD": secret}}
	raw, _ := json.Marshal(map[string]any{"arn": "arn:task/s", "containers": []any{task}})
	if _, err := j.Append(context.Background(),
		event.Record{Time: t0, Event: &event.PayloadReceived{MessageID: "m1", Tasks: []json.RawMessage{raw}}},
		event.Record{Time: t0, Task: "arn:task/s", Event: &event.TaskAdded{MessageID: "m1", Desired: event.StatusRunning, Containers: []event.ContainerSpec{task}}},
	); err != nil {
		t.Fatal(err)
	}
	rcv := newReceiver(t, nil)
	ship(t, j, rcv.endpoint(), nil)
	rcv.waitFor("2 records", func() bool { return len(rcv.accepted()) >= 2 })
	for i, q := range rcv.all() {
		if bytes.Contains(q.raw, []byte(secret)) {
			t.Fatalf("request %d carries the env value", i)
		}
		// Also as any field decoded, in case of an encoding the byte search would miss.
		if txt := prototext.Format(q.req); strings.Contains(txt, secret) {
			t.Fatalf("request %d carries the env value: %s", i, txt)
		}
	}
	if got := attrStr(rcv.accepted()[1].Attributes, AttrMessageID); got != "m1" {
		t.Fatalf("task_added shipped without its message id (%q)", got)
	}
}

// A SIGKILL while the shipper is idle must resend nothing: once caught up, the position is
// written whatever PersistEvery says.
func TestPositionIsWrittenOnceCaughtUp(t *testing.T) {
	j := openJournal(t, "")
	appendTransitions(t, j, "arn:task/1", 600, "") // two batches: the second falls in the throttle
	rcv := newReceiver(t, nil)
	r := ship(t, j, rcv.endpoint(), func(c *Config) { c.PersistEvery = time.Hour })
	r.settled(t, 600)
	deadline := time.Now().Add(30 * time.Second)
	for {
		v, err := j.Meta(PositionKey)
		if err != nil {
			t.Fatal(err)
		}
		if v == "600" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("position in the journal %q 30 s after catching up at 600", v)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Records linger for a fuller batch, but a full batch goes at once.
func TestAFullBatchDoesNotLinger(t *testing.T) {
	j := openJournal(t, "")
	rcv := newReceiver(t, nil)
	ship(t, j, rcv.endpoint(), func(c *Config) { c.Linger = time.Hour })
	appendTransitions(t, j, "arn:task/1", 1, "") // wakes the shipper, which lingers
	appendTransitions(t, j, "arn:task/1", 600, "")
	rcv.waitFor("a full batch", func() bool { return len(rcv.accepted()) >= MaxBatchRecords })
	if got := seqsOf(rcv.accepted()); !slices.Equal(got, wantSeqs(1, MaxBatchRecords)) {
		t.Fatalf("first batch %d records, want 1..%d", len(got), MaxBatchRecords)
	}
}

// A hung endpoint costs one request timeout, then a retry; a redirect is never followed, so a
// header (an API key) only ever goes to the configured URL.
func TestTimeoutsRetriedAndRedirectsNotFollowed(t *testing.T) {
	var elsewhere atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { elsewhere.Add(1) }))
	defer other.Close()
	release := make(chan struct{})
	defer close(release)
	j := openJournal(t, "")
	appendTransitions(t, j, "arn:task/1", 3, "")
	rcv := newReceiver(t, func(n int, w http.ResponseWriter) bool {
		switch n {
		case 0:
			<-release // hangs past the shipper's timeout
			return true
		case 1:
			w.Header().Set("Location", other.URL+"/v1/logs")
			w.WriteHeader(http.StatusTemporaryRedirect)
			return true
		}
		return false
	})
	ep := rcv.endpoint()
	ep.Headers = map[string]string{"Authorization": "Bearer k"}
	r := ship(t, j, ep, func(c *Config) { c.Timeout = 300 * time.Millisecond })
	r.settled(t, 3)
	if n := elsewhere.Load(); n != 0 {
		t.Fatalf("the redirect was followed: %d requests reached the other server", n)
	}
	if st := r.s.Stats(); st.Retried < 2 || st.Shipped != 3 {
		t.Fatalf("stats %+v: want the timeout and the redirect retried, 3 shipped", st)
	}
}

// OTEL_EXPORTER_OTLP_CERTIFICATE is the CA an https endpoint is checked against; a partial
// success's rejected count is counted, not retried.
func TestCertificateFileAndPartialSuccess(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		b, _ := proto.Marshal(&collogspb.ExportLogsServiceResponse{PartialSuccess: &collogspb.ExportLogsPartialSuccess{RejectedLogRecords: 2, ErrorMessage: "too old"}})
		_, _ = w.Write(b)
	}))
	defer srv.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	j := openJournal(t, "")
	appendTransitions(t, j, "arn:task/1", 5, "")
	r := ship(t, j, Endpoint{URL: srv.URL + "/v1/logs", CAFile: ca}, nil)
	r.settled(t, 5)
	if st := r.s.Stats(); st.Rejected != 2 || st.Shipped != 5 || hits.Load() != 1 {
		t.Fatalf("stats %+v after %d requests: want 2 rejected, 5 shipped, no retry", st, hits.Load())
	}
	// Without the CA file the server is not trusted: nothing is shipped.
	j2 := openJournal(t, "")
	appendTransitions(t, j2, "arn:task/1", 1, "")
	untrusted := ship(t, j2, Endpoint{URL: srv.URL + "/v1/logs"}, nil)
	deadline := time.Now().Add(60 * time.Second)
	for untrusted.s.Stats().Retried < 2 {
		if time.Now().After(deadline) {
			t.Fatal("no retry against the untrusted endpoint within 60 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if hits.Load() != 1 || untrusted.s.Stats().Shipped != 0 {
		t.Fatalf("an https endpoint signed by an unknown CA was trusted")
	}
	if _, err := New(j2, Config{Endpoint: Endpoint{URL: srv.URL, CAFile: filepath.Join(t.TempDir(), "missing.pem")}}); err == nil || !strings.Contains(err.Error(), EnvCertificate) {
		t.Fatalf("a missing CA file: err %v, want one naming %s", err, EnvCertificate)
	}
}

// On a busy agent a commit comes every few milliseconds: a shipper that woke at every one
// would take the CPU from the appenders each commit has just released. While records come
// faster than Linger, it wakes once a batch (NotifyAt), not once a commit.
func TestTheShipperWakesOnceABatch(t *testing.T) {
	j := openJournal(t, "")
	rcv := newReceiver(t, nil)
	r := ship(t, j, rcv.endpoint(), func(c *Config) { c.Linger = time.Hour })
	const batches, perCommit = 3, 8
	for range batches * MaxBatchRecords / perCommit {
		appendTransitions(t, j, "arn:task/1", perCommit, "")
	}
	r.settled(t, batches*MaxBatchRecords)
	commits := batches * MaxBatchRecords / perCommit
	// Once idle (the first commit), once a full batch; a batch's delivery overlapping the
	// next may save one.
	if w := r.s.wakeups.Load(); w > 2*batches+2 {
		t.Fatalf("the shipper woke %d times for %d commits in %d batches, want at most %d", w, commits, batches, 2*batches+2)
	}
}

// A read transaction held while a request is on the wire would keep the writer from reusing
// the pages freed since (and from remapping a growing file) for as long as the endpoint takes:
// the batch is read and encoded, the transaction released, and only then is it sent.
func TestNoReadTransactionIsHeldAcrossARequest(t *testing.T) {
	j := openJournal(t, "")
	var held atomic.Int32
	rcv := newReceiver(t, func(_ int, _ http.ResponseWriter) bool {
		if n := j.DB().Stats().OpenTxN; n != 0 {
			held.Store(int32(n))
		}
		return false
	})
	r := ship(t, j, rcv.endpoint(), nil)
	appendTransitions(t, j, "arn:task/1", 2*MaxBatchRecords+5, "")
	r.settled(t, 2*MaxBatchRecords+5)
	if n := held.Load(); n != 0 {
		t.Fatalf("%d read transactions open while the endpoint was answering a request", n)
	}
}
