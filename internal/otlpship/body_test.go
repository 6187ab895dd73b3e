package otlpship_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/forensics"
	"github.com/agentd/agentd/internal/otlpship"
)

// A log viewer that shows only bodies must read every record as `agentd journal dump` prints
// it after its sequence and time (PROTOCOL.md §5, 1.3): type, subject, details, never empty —
// for a record of every type the event package declares, with no details at all, under each
// kind of subject; and a sealed value shows in neither.
func TestEveryRecordsBodyIsItsDumpLine(t *testing.T) {
	const secret = "hunter2-s3cr3t"
	sealed := event.ContainerSpec{Name: "db", Image: "postgres", Env: map[string]string{"PASSWORD": secret}}
	task, _ := json.Marshal(map[string]any{"arn": "arn:task/s", "containers": []any{sealed}})
	subjects := []struct{ task, container, shown string }{
		{"arn:agentd:task/x", "", "arn:agentd:task/x"},
		{"arn:agentd:task/x", "web", "arn:agentd:task/x/web"},
		{"", "", "-"},
		{"arn:task/a b", "we\nb", `"arn:task/a b"/"we\nb"`},
	}
	var events []event.Event
	for _, typ := range event.Types() {
		ev, err := event.UnmarshalBody(typ, []byte("{}")) // the type's zero value: no details
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, ev)
	}
	events = append(events, &event.TaskAdded{MessageID: "m1", Containers: []event.ContainerSpec{sealed}},
		&event.PayloadReceived{MessageID: "m1", Tasks: []json.RawMessage{task}})
	for _, ev := range events {
		for _, s := range subjects {
			r := event.Record{Seq: 42, Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Task: s.task, Container: s.container, Event: ev}
			body := otlpship.LogRecord(r, r.Time).GetBody().GetStringValue()
			head := ev.Type().String() + " " + s.shown
			if body != head && !strings.HasPrefix(body, head+" ") {
				t.Errorf("%s of %q: body %q, want it to open with %q", ev.Type(), s.task, body, head)
			}
			// The dump's columns are padded: the same words, in the same order, after seq and time.
			if dump := strings.Fields(forensics.Line(r)); !slices.Equal(strings.Fields(body), dump[2:]) {
				t.Errorf("%s of %q: body %q, journal dump prints %q", ev.Type(), s.task, body, forensics.Line(r))
			}
			if strings.Contains(body, secret) || strings.Contains(forensics.Line(r), secret) {
				t.Errorf("%s: a sealed value in the body %q", ev.Type(), body)
			}
		}
	}
	r := event.Record{Task: "arn:agentd:task/x", Event: &event.CleanupStarted{}}
	if got := otlpship.LogRecord(r, time.Time{}).GetBody().GetStringValue(); got != "cleanup_started arn:agentd:task/x" {
		t.Errorf("a cleanup's body %q, want %q", got, "cleanup_started arn:agentd:task/x")
	}
}

// The forensics import takes a body apart again: the details, whatever the subject, and a
// body shipped before 1.3 (details alone) as it was.
func TestBodyDetailsAreWhatFollowsTheSubject(t *testing.T) {
	for _, c := range []struct{ body, typ, task, container, want string }{
		{"cleanup_started arn:task/x", "cleanup_started", "arn:task/x", "", ""},
		{"container_transitioned arn:task/x/web RUNNING → STOPPED exit=1", "container_transitioned", "arn:task/x", "web", "RUNNING → STOPPED exit=1"},
		{`call_ended "arn:task/a b" call=start`, "call_ended", "arn:task/a b", "", "call=start"},
		{"payload_received - message=m1", "payload_received", "", "", "message=m1"},
		{"RUNNING → STOPPED exit=1", "container_transitioned", "arn:task/x", "web", "RUNNING → STOPPED exit=1"},
	} {
		if got := otlpship.BodyDetails(c.body, c.typ, c.task, c.container); got != c.want {
			t.Errorf("BodyDetails(%q) = %q, want %q", c.body, got, c.want)
		}
	}
}
