package forensics

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/journal"
)

// Filter selects records. Zero fields select everything.
type Filter struct {
	Task           string
	Types          []event.Type
	FromSeq, ToSeq uint64
	Since, Until   time.Time
	// Reveal, when set, transforms each record before it is shown (agentd journal dump
	// --unseal opens sealed env values with the local key). Nil shows records as stored.
	Reveal func(event.Record) event.Record
}

// Match reports whether a record passes the filter.
func (f Filter) Match(r event.Record) bool {
	if f.Task != "" && r.Task != f.Task {
		return false
	}
	if len(f.Types) > 0 {
		ok := false
		for _, t := range f.Types {
			ok = ok || r.Type() == t
		}
		if !ok {
			return false
		}
	}
	if (f.FromSeq != 0 && r.Seq < f.FromSeq) || (f.ToSeq != 0 && r.Seq > f.ToSeq) {
		return false
	}
	if (!f.Since.IsZero() && r.Time.Before(f.Since)) || (!f.Until.IsZero() && r.Time.After(f.Until)) {
		return false
	}
	return true
}

// ParseTime reads RFC 3339, or a time relative to now like -2h or -30m.
func ParseTime(v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if strings.HasPrefix(v, "-") {
		d, err := time.ParseDuration(v[1:])
		if err != nil {
			return time.Time{}, fmt.Errorf("%q: neither RFC 3339 nor a relative time like -2h", v)
		}
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q: neither RFC 3339 nor a relative time like -2h", v)
	}
	return t, nil
}

// ParseTypes reads comma-separated wire names.
func ParseTypes(v string) ([]event.Type, error) {
	if v == "" {
		return nil, nil
	}
	var out []event.Type
	for _, name := range strings.Split(v, ",") {
		t, ok := event.ParseType(strings.TrimSpace(name))
		if !ok {
			var names []string
			for _, t := range event.Types() {
				names = append(names, t.String())
			}
			return nil, fmt.Errorf("%q is not a record type (%s)", name, strings.Join(names, ", "))
		}
		out = append(out, t)
	}
	return out, nil
}

// RecordJSON is a record as one JSON object: seq, time, type, task_arn and container where
// they apply, and the type's fields.
func RecordJSON(r event.Record) ([]byte, error) {
	body, err := json.Marshal(r.Event)
	if err != nil {
		return nil, err
	}
	m := map[string]json.RawMessage{}
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	put := func(k string, v any) { b, _ := json.Marshal(v); m[k] = b }
	put("seq", r.Seq)
	put("time", r.Time.UTC().Format(time.RFC3339Nano))
	put("type", r.Type().String())
	if r.Task != "" {
		put("task_arn", r.Task)
	}
	if r.Container != "" {
		put("container", r.Container)
	}
	return json.Marshal(m)
}

// Line is a record on one human-readable line: its sequence and time, then event.Line in
// columns (what an OTLP body carries, one space apart).
func Line(r event.Record) string {
	return fmt.Sprintf("%8d  %s  %s", r.Seq, r.Time.UTC().Format("2006-01-02T15:04:05.000Z"), event.Line(r, 22, 28))
}

// Dump writes the records that pass the filter, one per line, human or JSON.
func Dump(w io.Writer, j *journal.Journal, f Filter, asJSON bool) (int, error) {
	n := 0
	emit := func(r event.Record) error {
		if !f.Match(r) {
			return nil
		}
		n++
		if f.Reveal != nil {
			r = f.Reveal(r)
		}
		if asJSON {
			b, err := RecordJSON(r)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(w, "%s\n", b)
			return err
		}
		_, err := fmt.Fprintln(w, Line(r))
		return err
	}
	var err error
	if f.Task != "" {
		err = j.TaskRecords(f.Task, emit)
	} else {
		err = j.IterateRange(max(f.FromSeq, 1), f.ToSeq, emit)
	}
	return n, err
}
