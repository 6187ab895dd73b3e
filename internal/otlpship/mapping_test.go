package otlpship

import (
	"testing"
	"time"

	"github.com/agentd/agentd/internal/event"
)

func intp(i int) *int { return &i }

func TestLogRecordSeverityAndAttributes(t *testing.T) {
	cases := []struct {
		name  string
		rec   event.Record
		warn  bool
		attrs map[string]any // string or int64; absent keys must be absent
	}{
		{"stopped exit 0 on request", event.Record{Task: "arn:t", Container: "web", Event: &event.ContainerTransitioned{From: event.StatusRunning, To: event.StatusStopped, ExitCode: intp(0), Reason: "stopped by agentd: stopped by the control plane"}},
			false, map[string]any{AttrTask: "arn:t", AttrContainer: "web", AttrStatusFrom: "RUNNING", AttrStatusTo: "STOPPED", AttrExitCode: int64(0), AttrReason: "stopped by agentd: stopped by the control plane", AttrType: "container_transitioned"}},
		{"stopped with a non-zero exit", event.Record{Task: "arn:t", Container: "web", Event: &event.ContainerTransitioned{From: event.StatusRunning, To: event.StatusStopped, ExitCode: intp(137)}},
			true, map[string]any{AttrExitCode: int64(137)}},
		{"stopped for a failure", event.Record{Task: "arn:t", Container: "web", Event: &event.ContainerTransitioned{From: event.StatusNone, To: event.StatusStopped, Reason: "pull failed: 404"}},
			true, map[string]any{AttrReason: "pull failed: 404"}},
		{"task stopped because an essential container failed", event.Record{Task: "arn:t", Event: &event.TaskTransitioned{From: event.StatusRunning, To: event.StatusStopped, Reason: "essential container web exited with code 1"}},
			true, map[string]any{AttrStatusTo: "STOPPED", AttrContainer: nil}},
		{"task stopped, all containers done", event.Record{Task: "arn:t", Event: &event.TaskTransitioned{From: event.StatusRunning, To: event.StatusStopped, Reason: "all containers stopped"}},
			false, nil},
		{"running is info", event.Record{Task: "arn:t", Container: "web", Event: &event.ContainerTransitioned{From: event.StatusCreated, To: event.StatusRunning, ImageDigest: "sha256:ab"}},
			false, map[string]any{AttrImageDigest: "sha256:ab", AttrExitCode: nil, AttrReason: nil}},
		{"failed runtime call", event.Record{Task: "arn:t", Container: "web", Event: &event.CallEnded{Call: "start", Reason: "failed: no such image"}},
			true, map[string]any{AttrReason: "failed: no such image"}},
		{"stopped acked", event.Record{Task: "arn:t", Event: &event.StoppedAcked{ChangeID: "c-9"}}, false, map[string]any{AttrChangeID: "c-9"}},
		{"payload", event.Record{Event: &event.PayloadReceived{MessageID: "m-1"}}, false, map[string]any{AttrMessageID: "m-1", AttrTask: nil}},
		{"a payload's record refused by the core", event.Record{Task: "arn:t", Event: &event.RecordRefused{MessageID: "m-17", Record: "task_added", Reason: "task without containers"}},
			false, map[string]any{AttrType: "record_refused", AttrTask: "arn:t", AttrMessageID: "m-17", AttrReason: "task without containers", AttrContainer: nil}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.rec.Seq, c.rec.Time = uint64(i+1), t0
			lr := LogRecord(c.rec, t0.Add(time.Second))
			if got := lr.SeverityText == "WARN"; got != c.warn {
				t.Fatalf("severity %s, want WARN=%v", lr.SeverityText, c.warn)
			}
			if want := event.Line(c.rec, 0, 0); lr.Body.GetStringValue() != want {
				t.Fatalf("body %q, want journal dump's %q", lr.Body.GetStringValue(), want)
			}
			if lr.TimeUnixNano != uint64(t0.UnixNano()) || lr.ObservedTimeUnixNano != uint64(t0.Add(time.Second).UnixNano()) {
				t.Fatalf("times %d/%d", lr.TimeUnixNano, lr.ObservedTimeUnixNano)
			}
			if v, _ := attr(lr.Attributes, AttrSeq); v.GetIntValue() != int64(i+1) {
				t.Fatalf("agentd.seq %v", v)
			}
			for k, want := range c.attrs {
				v, ok := attr(lr.Attributes, k)
				switch w := want.(type) {
				case nil:
					if ok {
						t.Errorf("%s present (%v), want absent", k, v)
					}
				case string:
					if v.GetStringValue() != w {
						t.Errorf("%s = %v, want %q", k, v, w)
					}
				case int64:
					if !ok || v.GetIntValue() != w {
						t.Errorf("%s = %v, want int %d", k, v, w)
					}
				}
			}
		})
	}
}
