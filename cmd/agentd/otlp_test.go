package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	"google.golang.org/protobuf/proto"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/journal"
	"github.com/agentd/agentd/internal/otlpship"
)

// otlpSink is an OTLP/HTTP logs endpoint for the process tests: it decodes every request with
// the proto types and keeps, per agent, the agentd.seq of every record in arrival order.
type otlpSink struct {
	refuse atomic.Bool // answer 503 while set
	mu     sync.Mutex
	raw    [][]byte
	seqs   map[string][]uint64 // service.instance.id → agentd.seq in arrival order
	bad    []string
}

func newOTLPSink(t *testing.T) (*otlpSink, string) {
	s := &otlpSink{seqs: map[string][]uint64{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.refuse.Load() {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		b, _ := io.ReadAll(r.Body)
		var req collogspb.ExportLogsServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil || r.URL.Path != "/v1/logs" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.raw = append(s.raw, b)
		for _, rl := range req.ResourceLogs {
			id := ""
			for _, kv := range rl.Resource.Attributes {
				if kv.Key == "service.instance.id" {
					id = kv.Value.GetStringValue()
				}
			}
			for _, sl := range rl.ScopeLogs {
				for _, lr := range sl.LogRecords {
					seq := int64(-1)
					for _, kv := range lr.Attributes {
						if kv.Key == otlpship.AttrSeq {
							seq = kv.Value.GetIntValue()
						}
					}
					if seq <= 0 {
						s.bad = append(s.bad, lr.String())
						continue
					}
					s.seqs[id] = append(s.seqs[id], uint64(seq))
				}
			}
		}
	}))
	t.Cleanup(srv.Close)
	return s, srv.URL
}

// firstArrivals is the agent's seqs in order of first arrival, and whether 1..last all came.
func (s *otlpSink) firstArrivals(agent string, last uint64) (order []uint64, complete bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[uint64]bool{}
	for _, q := range s.seqs[agent] {
		if !seen[q] {
			seen[q] = true
			order = append(order, q)
		}
	}
	for q := uint64(1); q <= last; q++ {
		if !seen[q] {
			return order, false
		}
	}
	return order, true
}

// TestOTLPShippingSurvivesKillAndOutage runs the real agent shipping to an OTLP endpoint that
// refuses (503) for a while, SIGKILLs it mid-work and starts it again: in the end every record
// the killed agent committed arrived at least once, first arrivals in agentd.seq order, the
// agent stayed healthy while the endpoint refused (otlp only degraded), and no env value was
// shipped.
func TestOTLPShippingSurvivesKillAndOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: spawns processes")
	}
	t.Parallel()
	const secret = "pa55-w0rd-never-shipped"
	sink, sinkURL := newOTLPSink(t)
	sink.refuse.Store(true)
	dir := filepath.Join(t.TempDir(), "data")
	cp := startProc(t, "controlplane", "--listen", "127.0.0.1:0", "--log-format", "json")
	cpURL := "http://" + cp.await(t, "reference control plane serving (development and test tool, in memory)", 30*time.Second)["listen"].(string)
	agent, api := startAgentProc(t, dir, cpURL, "--otlp-endpoint", sinkURL)
	for i, cmd := range [][]string{{"exit", "0"}, {"exit", "3"}, {"run"}} {
		task := map[string]any{"arn": "task/otlp-" + string(rune('a'+i)), "containers": []map[string]any{{
			"name": "app", "image": "web:1", "command": cmd, "env": map[string]string{"PASSWORD": secret}}}}
		postJSON(t, cpURL+"/v1/tasks", map[string]any{"agent": "agent-e2e", "task": task})
	}
	// While the endpoint refuses, the agent's health is untouched; the otlp slot says why.
	deadline := time.Now().Add(60 * time.Second)
	for {
		code := getJSON(t, api+"/healthz", nil)
		if code != http.StatusOK && code != 0 {
			t.Fatalf("/healthz %d while only the OTLP endpoint refuses: shipping must never make the agent unhealthy", code)
		}
		if code == http.StatusOK && strings.Contains(metricsText(t, api), `agentd_source_healthy{source="otlp"} 0`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the otlp slot never showed the refusals within 60 s:\n%s", agent.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // let the tasks make some history while refused
	agent.kill()
	j, err := journal.Open(filepath.Join(dir, journal.FileName), journal.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	last := j.LastSeq()
	j.Close()
	sink.refuse.Store(false)
	_, _ = startAgentProc(t, dir, cpURL, "--otlp-endpoint", sinkURL)
	deadline = time.Now().Add(90 * time.Second)
	for {
		order, complete := sink.firstArrivals("agent-e2e", last)
		if complete {
			for i := 1; i < len(order); i++ {
				if order[i] <= order[i-1] {
					t.Fatalf("first arrivals out of agentd.seq order at %d: %v", i, order)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("records 1..%d of the killed agent not all shipped within 90 s; first arrivals %v", last, order)
		}
		time.Sleep(50 * time.Millisecond)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	for _, b := range sink.raw {
		if bytes.Contains(b, []byte(secret)) {
			t.Fatal("an env value was shipped")
		}
	}
	if len(sink.bad) > 0 {
		t.Fatalf("records without agentd.seq (no gap was expected): %v", sink.bad)
	}
}

func metricsText(t *testing.T, api string) string {
	resp, err := ownClient.Get(api + "/metrics") // fresh, not the answer shared among callers without credentials
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// `journal dump --task ARN FILE…` merges hosts' journals by time, each line naming its host;
// several files without --task is refused, naming the flag.
func TestJournalDumpAcrossHosts(t *testing.T) {
	dir := t.TempDir()
	write := func(host string, at time.Time) string {
		path := filepath.Join(dir, host+".db")
		j, err := journal.Open(path, journal.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer j.Close()
		ctx := t.Context()
		if err := j.SetMeta(ctx, "agent_id", host); err != nil {
			t.Fatal(err)
		}
		if _, err := j.Append(ctx, event.Record{Time: at, Task: "task/moved", Container: "app",
			Event: &event.ContainerTransitioned{From: event.StatusCreated, To: event.StatusRunning}}); err != nil {
			t.Fatal(err)
		}
		return path
	}
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	b := write("host-b", t0.Add(time.Minute))
	a := write("host-a", t0)
	out, err := exec.Command(agentdBinary(t), "journal", "dump", "--task", "task/moved", b, a).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "host-a ") || !strings.HasPrefix(lines[1], "host-b ") || !strings.Contains(lines[0], "task/moved/app") {
		t.Fatalf("want host-a's line then host-b's, each naming host and container:\n%s", out)
	}
	if out, err := exec.Command(agentdBinary(t), "journal", "dump", a, b).CombinedOutput(); err == nil || !strings.Contains(string(out), "--task") {
		t.Fatalf("several files without --task: %v\n%s", err, out)
	}
}
