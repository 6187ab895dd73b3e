package otlpship

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	"google.golang.org/protobuf/proto"
)

// receiver is an in-process OTLP/HTTP logs endpoint: it decodes every request with the proto
// types, keeps it, and answers what the test's script says for the n-th request (0-based).
type receiver struct {
	t      *testing.T
	srv    *httptest.Server
	answer func(n int, w http.ResponseWriter) bool // true: answered (not accepted); false: accept

	mu       sync.Mutex
	count    int
	requests []received
	arrived  chan struct{}
}

type received struct {
	at       time.Time
	raw      []byte
	header   http.Header
	req      *collogspb.ExportLogsServiceRequest
	accepted bool
}

func newReceiver(t *testing.T, answer func(n int, w http.ResponseWriter) bool) *receiver {
	r := &receiver{t: t, answer: answer, arrived: make(chan struct{}, 4096)}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path != "/v1/logs" || req.Method != http.MethodPost {
		http.Error(w, "not here", http.StatusNotFound)
		return
	}
	raw, _ := io.ReadAll(req.Body)
	var msg collogspb.ExportLogsServiceRequest
	if err := proto.Unmarshal(raw, &msg); err != nil {
		r.t.Errorf("receiver: undecodable request: %v", err)
		http.Error(w, "bad", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	n := r.count // numbered at arrival: a request the script holds does not hold the next
	r.count++
	r.mu.Unlock()
	answered := r.answer != nil && r.answer(n, w)
	r.mu.Lock()
	r.requests = append(r.requests, received{at: time.Now(), raw: raw, header: req.Header.Clone(), req: &msg, accepted: !answered})
	r.mu.Unlock()
	if !answered {
		w.Header().Set("Content-Type", "application/x-protobuf")
		b, _ := proto.Marshal(&collogspb.ExportLogsServiceResponse{})
		_, _ = w.Write(b)
	}
	r.arrived <- struct{}{}
}

func (r *receiver) endpoint() Endpoint { return Endpoint{URL: r.srv.URL + "/v1/logs"} }

func (r *receiver) all() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.requests...)
}

// accepted is every log record of accepted requests, in arrival order.
func (r *receiver) accepted() []*logspb.LogRecord {
	var out []*logspb.LogRecord
	for _, q := range r.all() {
		if q.accepted {
			out = append(out, records(q.req)...)
		}
	}
	return out
}

func records(req *collogspb.ExportLogsServiceRequest) []*logspb.LogRecord {
	var out []*logspb.LogRecord
	for _, rl := range req.ResourceLogs {
		for _, sl := range rl.ScopeLogs {
			out = append(out, sl.LogRecords...)
		}
	}
	return out
}

// waitFor waits (bounded) until cond holds over what arrived.
func (r *receiver) waitFor(what string, cond func() bool) {
	r.t.Helper()
	deadline := time.After(60 * time.Second)
	for !cond() {
		select {
		case <-r.arrived:
		case <-deadline:
			r.t.Fatalf("receiver: waited 60 s for %s; got %d requests", what, len(r.all()))
		}
	}
}

// seqsOf lists agentd.seq of the records (0 for a record without one, i.e. a gap).
func seqsOf(recs []*logspb.LogRecord) []uint64 {
	out := make([]uint64, len(recs))
	for i, lr := range recs {
		if v, ok := attr(lr.Attributes, AttrSeq); ok {
			out[i] = uint64(v.GetIntValue())
		}
	}
	return out
}

func attr(kvs []*commonpb.KeyValue, key string) (*commonpb.AnyValue, bool) {
	for _, kv := range kvs {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return nil, false
}

func attrStr(kvs []*commonpb.KeyValue, key string) string {
	v, _ := attr(kvs, key)
	return v.GetStringValue()
}
