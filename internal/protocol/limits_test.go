package protocol

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// Version 1.1's limits, each against a task that broke the agent before them: a 40 KB ARN
// (over bbolt's key limit, so no commit holding it could succeed), ARNs with whitespace or
// control characters (forged log and forensics lines), a 3.5 MB desired_status quoted into a
// 21 MB reason, and an env name that reaches Docker as PATH.
func TestVersion11Limits(t *testing.T) {
	task := func(arn, desired string, env map[string]string) json.RawMessage {
		b, _ := json.Marshal(Task{ARN: arn, DesiredStatus: desired, Containers: []Container{{Name: "app", Image: "web:1", Env: env}}})
		return b
	}
	cases := []struct {
		name    string
		raw     json.RawMessage
		arn     string // "" : skipped like a task without arn
		invalid string // substring of the reason, "" for a valid task
	}{
		{"valid", task("task/1", "RUNNING", nil), "task/1", ""},
		{"256-byte arn", task(strings.Repeat("a", 256), "RUNNING", nil), strings.Repeat("a", 256), ""},
		{"40 KB arn", task(strings.Repeat("a", 40<<10), "RUNNING", nil), "", ""},
		{"257-byte arn", task(strings.Repeat("a", 257), "RUNNING", nil), "", ""},
		{"arn with a space", task("task/a b", "RUNNING", nil), "", ""},
		{"arn with NUL", task("task/a\x00b", "RUNNING", nil), "", ""},
		{"arn with newline", task("task/a\nrecord 1: forged", "RUNNING", nil), "", ""},
		{"arn with tab", task("task/a\tb", "RUNNING", nil), "", ""},
		{"arn with DEL", task("task/a\x7fb", "RUNNING", nil), "", ""},
		{"arn not UTF-8", json.RawMessage(`{"arn":"task/\xff","desired_status":"RUNNING","containers":[{"name":"a","image":"b"}]}`), "", ""},
		{"unicode arn", task("task/ümlaut-ß", "RUNNING", nil), "task/ümlaut-ß", ""},
		{"broken task with a bad arn", json.RawMessage(`{"arn":"task/a b","containers":"nope"}`), "", ""},
		{"3.5 MB desired_status", task("task/2", strings.Repeat(`"\`, 1750<<10), nil), "task/2", "desired_status"},
		{"env name with =", task("task/3", "RUNNING", map[string]string{"PATH=/evil:": "x"}), "task/3", "containers[0].env"},
		{"env name with NUL", task("task/4", "RUNNING", map[string]string{"A\x00B": "x"}), "task/4", "containers[0].env"},
		{"empty env name", task("task/5", "RUNNING", map[string]string{"": "x"}), "task/5", "containers[0].env"},
		{"desired PAUSED", task("task/6", "PAUSED", nil), "task/6", "desired_status"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := DecodeTask(tc.raw)
			if d.ARN != tc.arn {
				t.Fatalf("arn %.40q; want %.40q (invalid: %.200s)", d.ARN, tc.arn, d.Invalid)
			}
			if len(d.Invalid) > MaxReasonBytes || !utf8.ValidString(d.Invalid) {
				t.Fatalf("reason of %d bytes (valid UTF-8: %v); at most %d", len(d.Invalid), utf8.ValidString(d.Invalid), MaxReasonBytes)
			}
			if tc.arn == "" {
				if d.Invalid == "" || !strings.Contains(d.Invalid, "arn") {
					t.Fatalf("a skipped task must say why: %q", d.Invalid)
				}
				return
			}
			if tc.invalid == "" && d.Invalid != "" || !strings.Contains(d.Invalid, tc.invalid) {
				t.Fatalf("invalid %q; want %q", d.Invalid, tc.invalid)
			}
			// Whatever the reason quotes is escaped: it is printable and has no newline.
			if strings.ContainsAny(d.Invalid, "\n\x00") {
				t.Fatalf("raw control characters in the reason: %q", d.Invalid)
			}
		})
	}
}

// An invalid task keeps only the containers its reports may name.
func TestInvalidTaskKeepsOnlyReportableContainers(t *testing.T) {
	cs := []Container{{Name: "app"}, {Name: strings.Repeat("x", 40<<10)}, {Name: "app"}, {Name: "a b"}}
	for i := 0; i < 20; i++ {
		cs = append(cs, Container{Name: "c" + strings.Repeat("1", i+1)})
	}
	raw, _ := json.Marshal(Task{ARN: "task/many", DesiredStatus: "RUNNING", Containers: cs})
	d := DecodeTask(raw)
	if d.Invalid == "" {
		t.Fatal("a task with 24 containers is valid")
	}
	if len(d.Task.Containers) != MaxContainersPerTask || d.Task.Containers[0].Name != "app" || d.Task.Containers[1].Name != "c1" {
		t.Fatalf("kept %d containers: %+v", len(d.Task.Containers), d.Task.Containers[:2])
	}
}

func TestShortenReasonAndQuote(t *testing.T) {
	long := strings.Repeat("é", 3000)
	if s := ShortenReason(long); len(s) > MaxReasonBytes || !utf8.ValidString(s) || !strings.HasSuffix(s, "(shortened)") {
		t.Fatalf("ShortenReason: %d bytes, valid %v", len(s), utf8.ValidString(s))
	}
	if s := ShortenReason("short"); s != "short" {
		t.Fatalf("ShortenReason changed a short reason: %q", s)
	}
	if q := Quote(strings.Repeat("\x00", 1<<20)); len(q) > 400 || strings.Contains(q, "\x00") || !strings.Contains(q, "1048576 bytes") {
		t.Fatalf("Quote: %d bytes: %.100q", len(q), q)
	}
}

func TestClassify413(t *testing.T) {
	r := ClassifyReport(http.StatusRequestEntityTooLarge, "", nil, time.Now())
	if r.Outcome != TooLarge || r.Err == nil {
		t.Fatalf("%+v; want too_large", r)
	}
}
