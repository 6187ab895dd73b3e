package main

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/journal"
	"github.com/agentd/agentd/internal/otlpship"
)

// The `make test-otel` tests run a real OpenTelemetry Collector, built by the Makefile from
// testdata/otelcol (a module of its own) and named by AGENTD_OTELCOL.
func otelcolBinary(t *testing.T) string {
	bin := os.Getenv("AGENTD_OTELCOL")
	if bin == "" {
		t.Skip("needs the test Collector: make test-otel builds it from testdata/otelcol and sets AGENTD_OTELCOL")
	}
	return bin
}

func TestOTelCollectorValidatesTheDeployPipeline(t *testing.T) {
	bin := otelcolBinary(t)
	if out, err := exec.Command(bin, "validate", "--config", "../../deploy/otelcol-agentd.yaml").CombinedOutput(); err != nil {
		t.Fatalf("deploy/otelcol-agentd.yaml does not validate: %v\n%s", err, out)
	}
	// The validation is real: a pipeline naming an exporter it does not define is refused.
	b, _ := os.ReadFile("../../deploy/otelcol-agentd.yaml")
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, bytes.Replace(b, []byte("exporters: [otlphttp/loki]"), []byte("exporters: [otlphttp/lokii]"), 1), 0o600)
	if out, err := exec.Command(bin, "validate", "--config", bad).CombinedOutput(); err == nil {
		t.Fatalf("a pipeline with an undefined exporter validated:\n%s", out)
	}
}

// collectorRun is a running test Collector: its OTLP/HTTP address, its fault switch and the
// JSON lines it exported.
type collectorRun struct {
	url, faultFile, outFile string
}

func startCollector(t *testing.T) collectorRun {
	bin := otelcolBinary(t)
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := collectorRun{url: "http://" + addr, faultFile: filepath.Join(dir, "fault"), outFile: filepath.Join(dir, "out.jsonl")}
	cfg := fmt.Sprintf(`receivers:
  otlp:
    protocols:
      http:
        endpoint: %s
processors:
  fault:
    file: %s
  batch:
    send_batch_size: 200
    timeout: 200ms
exporters:
  jsonlines:
    path: %s
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    logs:
      receivers: [otlp]
      processors: [fault, batch]
      exporters: [jsonlines]
`, addr, c.faultFile, c.outFile)
	cfgFile := filepath.Join(dir, "config.yaml")
	os.WriteFile(cfgFile, []byte(cfg), 0o600)
	var log bytes.Buffer
	cmd := exec.Command(bin, "--config", cfgFile)
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-exited })
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-exited:
			t.Fatalf("the Collector exited:\n%s", log.String())
		default:
		}
		resp, err := http.Post(c.url+"/v1/logs", "application/x-protobuf", nil)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return c
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Collector did not answer on %s within 60 s:\n%s", addr, log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c collectorRun) fault(t *testing.T, what string) {
	if err := os.WriteFile(c.faultFile, []byte(what), 0o600); err != nil {
		t.Fatal(err)
	}
}

// arrival is one log record the Collector exported.
type arrival struct {
	seq                 uint64
	typ, task, cont     string
	service, host, scop string
}

// arrivals parses the Collector's output: per agent, its records in order of arrival.
func (c collectorRun) arrivals(t *testing.T) (map[string][]arrival, []byte) {
	raw, _ := os.ReadFile(c.outFile)
	out := map[string][]arrival{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var req collogspb.ExportLogsServiceRequest
		if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(sc.Bytes(), &req); err != nil {
			continue // a line being written
		}
		for _, rl := range req.ResourceLogs {
			res := map[string]string{}
			for _, kv := range rl.Resource.Attributes {
				res[kv.Key] = kv.Value.GetStringValue()
			}
			for _, sl := range rl.ScopeLogs {
				for _, lr := range sl.LogRecords {
					a := arrival{service: res["service.name"], host: res["host.name"], scop: sl.Scope.GetName()}
					for _, kv := range lr.Attributes {
						switch kv.Key {
						case otlpship.AttrSeq:
							a.seq = uint64(kv.Value.GetIntValue())
						case otlpship.AttrType:
							a.typ = kv.Value.GetStringValue()
						case otlpship.AttrTask:
							a.task = kv.Value.GetStringValue()
						case otlpship.AttrContainer:
							a.cont = kv.Value.GetStringValue()
						}
					}
					out[res["service.instance.id"]] = append(out[res["service.instance.id"]], a)
				}
			}
		}
	}
	return out, raw
}

// TestOTelCollectorReceivesEveryRecordOfThreeAgents: three agents (simulated runtime, one
// control plane) ship through the real Collector, which refuses (503) and then stalls for a
// while; one agent is SIGKILLed during the refusal. In the end every record each agent
// committed arrived at least once with §5's attributes, per agent in seq order of first
// arrival, and no env value reached the Collector.
func TestOTelCollectorReceivesEveryRecordOfThreeAgents(t *testing.T) {
	const secret = "otel-s3cret-env-value"
	col := startCollector(t)
	cp := startProc(t, "controlplane", "--listen", "127.0.0.1:0", "--log-format", "json")
	cpURL := "http://" + cp.await(t, "reference control plane serving (development and test tool, in memory)", 30*time.Second)["listen"].(string)
	agents := []string{"otel-a", "otel-b", "otel-c"}
	dirs := map[string]string{}
	procs := map[string]*proc{}
	start := func(id string) {
		procs[id], _ = startAgentProc(t, dirs[id], cpURL, "--agent-id", id, "--otlp-endpoint", col.url)
	}
	for _, id := range agents {
		dirs[id] = filepath.Join(t.TempDir(), id)
		start(id)
	}
	assign := func(round int) {
		for _, id := range agents {
			for i, cmd := range [][]string{{"exit", "0"}, {"exit", "2"}, {"sleep", "400ms", "0"}} {
				task := map[string]any{"arn": fmt.Sprintf("task/%s-%d-%d", id, round, i), "containers": []map[string]any{{
					"name": "app", "image": "web:1", "command": cmd, "env": map[string]string{"TOKEN": secret}}}}
				postJSON(t, cpURL+"/v1/tasks", map[string]any{"agent": id, "task": task})
			}
		}
	}
	assign(0)
	time.Sleep(time.Second)
	col.fault(t, "refuse")
	assign(1)
	// The refusal is real: the Collector's receiver answers 503 and the agents retry.
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(procs["otel-a"].log(), "answered 503") {
		if time.Now().After(deadline) {
			t.Fatalf("otel-a saw no 503 from the refusing Collector within 60 s:\n%s", procs["otel-a"].log())
		}
		time.Sleep(50 * time.Millisecond)
	}
	procs["otel-b"].kill() // SIGKILL while its records are refused
	start("otel-b")
	time.Sleep(1500 * time.Millisecond)
	col.fault(t, "stall")
	assign(2)
	time.Sleep(3 * time.Second)
	col.fault(t, "")
	assign(3)
	time.Sleep(time.Second)

	// What each agent committed: kill it, read its journal, start it again to ship the rest.
	want := map[string][]event.Record{}
	for _, id := range agents {
		procs[id].kill()
		j, err := journal.Open(filepath.Join(dirs[id], journal.FileName), journal.Options{ReadOnly: true, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := j.Iterate(1, func(r event.Record) error { want[id] = append(want[id], r); return nil }); err != nil {
			t.Fatal(err)
		}
		j.Close()
		start(id)
	}
	deadline = time.Now().Add(120 * time.Second)
	for {
		got, raw := col.arrivals(t)
		missing := ""
		for _, id := range agents {
			seen := map[uint64]bool{}
			for _, a := range got[id] {
				seen[a.seq] = true
			}
			for _, r := range want[id] {
				if !seen[r.Seq] {
					missing = fmt.Sprintf("%s record %d (of %d)", id, r.Seq, len(want[id]))
					break
				}
			}
			if missing != "" {
				break
			}
		}
		if missing == "" {
			checkArrivals(t, agents, want, got)
			if bytes.Contains(raw, []byte(secret)) {
				t.Fatal("an env value reached the Collector")
			}
			procs["otel-a"].kill()
			readBack(t, col.outFile, filepath.Join(dirs["otel-a"], journal.FileName))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 120 s the Collector still lacks %s", missing)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func checkArrivals(t *testing.T, agents []string, want map[string][]event.Record, got map[string][]arrival) {
	t.Helper()
	for _, id := range agents {
		byseq := map[uint64]event.Record{}
		for _, r := range want[id] {
			byseq[r.Seq] = r
		}
		var last uint64
		first := map[uint64]bool{}
		for _, a := range got[id] {
			if a.typ == otlpship.GapType {
				t.Fatalf("%s: a gap arrived, but nothing was compacted or refused for good", id)
			}
			if first[a.seq] {
				continue // a duplicate: allowed (at least once)
			}
			first[a.seq] = true
			if a.seq < last {
				t.Fatalf("%s: record %d first arrived after %d: first deliveries must follow agentd.seq", id, a.seq, last)
			}
			last = a.seq
			r, ok := byseq[a.seq]
			if !ok {
				continue // committed after the journal was read
			}
			if a.typ != r.Type().String() || a.task != r.Task || a.cont != r.Container || a.service != "agentd" || a.host == "" || a.scop != otlpship.ScopeName {
				t.Fatalf("%s record %d arrived as %+v; the journal has %s %s/%s", id, a.seq, a, r.Type(), r.Task, r.Container)
			}
		}
	}
	t.Logf("records: %s %d, %s %d, %s %d", agents[0], len(want[agents[0]]), agents[1], len(want[agents[1]]), agents[2], len(want[agents[2]]))
}

// readBack imports the Collector's output and reads one of otel-b's tasks across otel-a's
// journal and the import, as an operator would after an incident.
func readBack(t *testing.T, collected, journalA string) {
	t.Helper()
	export := filepath.Join(t.TempDir(), "fleet.jsonl")
	if out, err := exec.Command(agentdBinary(t), "journal", "import-otlp", collected, "--out", export).CombinedOutput(); err != nil {
		t.Fatalf("import-otlp: %v\n%s", err, out)
	}
	out, err := exec.Command(agentdBinary(t), "journal", "timeline", "--task", "task/otel-b-1-1", journalA, export).CombinedOutput()
	if err != nil {
		t.Fatalf("timeline over a journal and the import: %v\n%s", err, out)
	}
	for _, want := range []string{"otel-b", "app RUNNING → STOPPED exit=2", "→ STOPPED reason=", "task task_cleaned"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("timeline lacks %q:\n%s", want, out)
		}
	}
}
