package forensics_test

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/forensics"
	"github.com/agentd/agentd/internal/journal"
	"github.com/agentd/agentd/internal/otlpship"
)

const arn = "arn:task/replaced"

var h0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

func intp(i int) *int { return &i }

// writeHost writes a journal of agent id host holding recs (times as given), closed.
func writeHost(t *testing.T, host string, recs ...event.Record) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), host+".db")
	j, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if err := j.SetMeta(context.Background(), "agent_id", host); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Append(context.Background(), recs...); err != nil {
		t.Fatal(err)
	}
	return path
}

func at(s int) time.Time { return h0.Add(time.Duration(s) * time.Second) }

func ct(s int, from, to event.Status, exit *int, reason string) event.Record {
	return event.Record{Time: at(s), Task: arn, Container: "web", Event: &event.ContainerTransitioned{From: from, To: to, ExitCode: exit, Reason: reason}}
}

// The task ran on agent-a until its host failed it, and was placed again on agent-b.
func twoHosts(t *testing.T) (a, b string) {
	added := &event.TaskAdded{MessageID: "m1", Desired: event.StatusRunning, Containers: []event.ContainerSpec{{Name: "web", Image: "web:1", Essential: true}}}
	a = writeHost(t, "agent-a",
		event.Record{Time: at(0), Task: arn, Event: added},
		ct(1, event.StatusNone, event.StatusCreated, nil, ""),
		event.Record{Time: at(2), Task: arn, Container: "web", Event: &event.CallStarted{Call: "start"}},
		ct(3, event.StatusCreated, event.StatusRunning, nil, ""),
		event.Record{Time: at(4), Task: arn, Container: "web", Event: &event.HealthChanged{Health: event.HealthHealthy}},
		event.Record{Time: at(5), Task: arn, Event: &event.TaskTransitioned{From: event.StatusCreated, To: event.StatusRunning}},
		ct(10, event.StatusRunning, event.StatusStopped, intp(137), "OutOfMemory: killed"),
		event.Record{Time: at(11), Task: arn, Event: &event.TaskTransitioned{From: event.StatusRunning, To: event.StatusStopped, Reason: "essential container web stopped: OutOfMemory: killed"}},
	)
	b = writeHost(t, "agent-b",
		event.Record{Time: at(20), Task: arn, Event: added},
		ct(21, event.StatusNone, event.StatusRunning, nil, ""),
		event.Record{Time: at(22), Task: arn, Container: "web", Event: &event.HealthChanged{Health: event.HealthUnhealthy}},
		event.Record{Time: at(23), Task: arn, Event: &event.TaskTransitioned{From: event.StatusNone, To: event.StatusRunning}},
	)
	return a, b
}

func fleet(t *testing.T, paths ...string) *forensics.Timeline {
	t.Helper()
	files, closeAll, err := forensics.OpenHostFiles(context.Background(), paths, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	tl, err := forensics.FleetTimeline(files, arn, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tl
}

// checkReplaced asserts what an operator must see of the re-placed task, however it was read.
func checkReplaced(t *testing.T, tl *forensics.Timeline) {
	t.Helper()
	if strings.Join(tl.Hosts, ",") != "agent-a,agent-b" {
		t.Fatalf("hosts %v, want agent-a then agent-b", tl.Hosts)
	}
	var last time.Time
	var text bytes.Buffer
	tl.WriteText(&text)
	for _, s := range tl.Steps {
		if s.Host == "" || s.Time.Before(last) {
			t.Fatalf("step %+v: every step names its host, in time order", s)
		}
		last = s.Time
	}
	for _, want := range []string{"agent-a", "agent-b", "web health=HEALTHY", "web health=UNHEALTHY", "web RUNNING → STOPPED"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("timeline text lacks %q:\n%s", want, text.String())
		}
	}
	if ia, ib := strings.Index(text.String(), "OutOfMemory"), strings.LastIndex(text.String(), "agent-b"); ia < 0 || ib < ia {
		t.Errorf("agent-a's stop must come before agent-b's run:\n%s", text.String())
	}
	var svg bytes.Buffer
	if err := tl.WriteSVG(&svg); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Texts   []string `xml:"text"`
		Circles []struct {
			Class string `xml:"class,attr"`
			Title string `xml:"title"`
		} `xml:"circle"`
	}
	if err := xml.Unmarshal(svg.Bytes(), &doc); err != nil {
		t.Fatalf("SVG does not parse: %v", err)
	}
	for _, lane := range []string{"agent-a · task", "agent-a · web", "agent-b · task", "agent-b · web"} {
		found := false
		for _, s := range doc.Texts {
			found = found || s == lane
		}
		if !found {
			t.Errorf("SVG has no lane %q (texts %v)", lane, doc.Texts)
		}
	}
	var health []string
	for _, c := range doc.Circles {
		if c.Class == "health" {
			health = append(health, c.Title)
		}
	}
	if strings.Join(health, "|") != "agent-a: web health=HEALTHY|agent-b: web health=UNHEALTHY" {
		t.Errorf("SVG health marks %q, want one per verdict naming host and container", health)
	}
}

func TestTimelineFollowsATaskReplacedOnAnotherHost(t *testing.T) {
	a, b := twoHosts(t)
	tl := fleet(t, a, b)
	checkReplaced(t, tl)
	for _, s := range tl.Steps {
		if s.Kind == "start" || strings.Contains(s.Text, "call=start") {
			if !strings.HasPrefix(s.Text, "web ") {
				t.Errorf("call line %q does not say whose it is", s.Text)
			}
		}
	}
}

// TestTimelineFromWhatTheCollectorReceived ships agent-b's journal (twice: receivers see
// duplicates) to an endpoint that writes each request as the Collector's file exporter does
// (OTLP/JSON a line), imports that, and reads the task across agent-a's journal and the import.
func TestTimelineFromWhatTheCollectorReceived(t *testing.T) {
	a, b := twoHosts(t)
	var mu sync.Mutex
	var lines bytes.Buffer
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var req collogspb.ExportLogsServiceRequest
		if err := proto.Unmarshal(raw, &req); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		js, _ := protojson.MarshalOptions{UseEnumNumbers: true}.Marshal(&req)
		mu.Lock()
		lines.Write(append(js, '\n'))
		mu.Unlock()
	}))
	defer srv.Close()
	for range 2 {
		j, err := journal.Open(b, journal.Options{})
		if err != nil {
			t.Fatal(err)
		}
		j.SetMeta(context.Background(), otlpship.PositionKey, "0") // ship it all again: a duplicate of every record
		s, err := otlpship.New(j, otlpship.Config{Endpoint: otlpship.Endpoint{URL: srv.URL + "/v1/logs"}, AgentID: "agent-b", Log: zerolog.Nop(), PersistEvery: -1})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { s.Run(ctx); close(done) }()
		deadline := time.Now().Add(30 * time.Second)
		for s.Stats().Position < j.LastSeq() && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
		<-done
		j.Close()
	}
	export := filepath.Join(t.TempDir(), "agent-b.otlp.jsonl")
	var out bytes.Buffer
	n, err := forensics.ImportOTLP(bytes.NewReader(lines.Bytes()), &out, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n != 4 {
		t.Fatalf("imported %d records from two shipments of 4, want each once", n)
	}
	if err := os.WriteFile(export, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	checkReplaced(t, fleet(t, a, export))
}

func TestImportOTLPNamesABadLine(t *testing.T) {
	_, err := forensics.ImportOTLP(strings.NewReader("{\"resourceLogs\":[]}\nnot json\n"), io.Discard, nil)
	if err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("err %v, want one naming line 2", err)
	}
}

func TestDumpOfATaskAcrossHostsNamesEachLinesHost(t *testing.T) {
	a, b := twoHosts(t)
	files, closeAll, err := forensics.OpenHostFiles(context.Background(), []string{b, a}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	entries, err := forensics.TaskEntries(files, arn, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 12 {
		t.Fatalf("%d entries, want the 8 of agent-a and the 4 of agent-b", len(entries))
	}
	for i, e := range entries {
		want := "agent-a"
		if i >= 8 {
			want = "agent-b"
		}
		if line := forensics.EntryLine(e); !strings.HasPrefix(line, want+" ") {
			t.Fatalf("line %d %q: want it from %s, merged by time", i, line, want)
		}
	}
}

// TestAnExportReadsAsItsJournal: a host read from its export gives every record the step kind
// the journal itself gives it, so a fleet timeline does not change with how a host was read.
func TestAnExportReadsAsItsJournal(t *testing.T) {
	a, _ := twoHosts(t)
	export := exportOf(t, a, "agent-a", nil)
	kinds := func(path string) map[uint64]string {
		out := map[uint64]string{}
		for _, s := range fleet(t, path).Steps {
			if s.Seq > 0 && out[s.Seq] == "" {
				out[s.Seq] = s.Kind
			}
		}
		return out
	}
	fromJournal, fromExport := kinds(a), kinds(export)
	if len(fromExport) < 8 {
		t.Fatalf("the export gave %d steps, want one a record", len(fromExport))
	}
	for seq, k := range fromExport {
		if fromJournal[seq] != k {
			t.Errorf("record %d: kind %q from the export, %q from the journal", seq, k, fromJournal[seq])
		}
	}
}

// exportOf writes the journal's records as `journal import-otlp` writes them, each passed
// through edit (nil: as they are; false: left out), and returns the export's path.
func exportOf(t *testing.T, path, host string, edit func(*forensics.Entry) bool) string {
	t.Helper()
	j, err := journal.Open(path, journal.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	var lines bytes.Buffer
	err = j.Iterate(1, func(r event.Record) error {
		e := forensics.EntryOf(host, r)
		if edit != nil && !edit(&e) {
			return nil
		}
		b, err := json.Marshal(e)
		lines.Write(append(b, '\n'))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	export := filepath.Join(t.TempDir(), host+".jsonl")
	if err := os.WriteFile(export, lines.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return export
}
