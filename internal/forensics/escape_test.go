package forensics_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/forensics"
	"github.com/agentd/agentd/internal/journal"
)

// A journal written before the ARN rule may hold any bytes in an ARN, a message id or a
// reason. Every line forensics prints for people shows them escaped: one line per record, no
// NUL, newline or control character raw, so a hostile ARN cannot forge a line of the output.
func TestHostileStringsPrintEscaped(t *testing.T) {
	path := copyJournal(t, "dev")
	j, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const arn = "task/evil\n       1  2026-11-29T10:00:00.000Z  cleanup_done           task/forged\x00\x1b[2J\u202e"
	spec := []event.ContainerSpec{{Name: "app", Image: "x", Essential: true}}
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	recs := []event.Record{
		{Time: at, Task: arn, Event: &event.TaskAdded{MessageID: "m-1\nforged", Desired: event.StatusRunning, Containers: spec}},
		{Time: at, Task: arn, Event: &event.TaskRejected{MessageID: "m-1", Reason: "bad\r\nrecord 1: forged\x00"}},
		{Time: at, Task: arn, Event: &event.RecordRefused{MessageID: "m-2\nforged", Record: "task_added", Reason: "bad\r\nrecord 1: forged\x00"}},
	}
	if _, err := j.Append(ctx, recs...); err != nil {
		t.Fatal(err)
	}
	j.Close()
	j, closeJ, err := forensics.Open(ctx, forensics.Source{File: path})
	if err != nil {
		t.Fatal(err)
	}
	defer closeJ()

	var dump bytes.Buffer
	n, err := forensics.Dump(&dump, j, forensics.Filter{Task: arn}, false)
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 || strings.Count(dump.String(), "\n") != n {
		t.Fatalf("dump --task: %d records in %d lines:\n%s", n, strings.Count(dump.String(), "\n"), dump.String())
	}
	assertPrintable(t, "dump", dump.String())
	if !strings.Contains(dump.String(), `"task/evil\n`) {
		t.Fatalf("dump does not show the ARN quoted and escaped:\n%s", dump.String())
	}

	tl, err := forensics.BuildTimeline(j, arn)
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	tl.WriteText(&text)
	assertPrintable(t, "timeline", text.String())
	if strings.Contains(text.String(), "\ntask/forged") || strings.Contains(text.String(), "\nrecord 1: forged") {
		t.Fatalf("timeline shows a forged line:\n%s", text.String())
	}

	rep, err := forensics.Verify(j)
	if err != nil {
		t.Fatal(err)
	}
	var v bytes.Buffer
	rep.Write(&v)
	assertPrintable(t, "verify", v.String())
}

func assertPrintable(t *testing.T, what, out string) {
	t.Helper()
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		for _, r := range line {
			if r != ' ' && !unicode.IsPrint(r) {
				t.Fatalf("%s prints %U raw in %q", what, r, line)
			}
		}
	}
}

func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"task/1":      "task/1",
		"task/ü":      "task/ü",
		"task/a b":    `"task/a b"`,
		"task/a\nb":   `"task/a\nb"`,
		"task/\x00":   `"task/\x00"`,
		`task/"q"`:    `"task/\"q\""`,
		"task/\xff":   `"task/\xff"`,
		"task/\u202e": `"task/\u202e"`,
		"":            `""`,
	} {
		if got := event.Printable(in); got != want {
			t.Errorf("Printable(%q) = %s; want %s", in, got, want)
		}
	}
	if got := event.PrintableText("a b\nc\x00\xff"); got != `a b\nc\x00\xff` {
		t.Errorf("PrintableText: %s", got)
	}
}
