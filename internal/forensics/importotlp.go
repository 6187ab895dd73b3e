package forensics

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"
	"unsafe"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/agentd/agentd/internal/otlpship"
)

// ImportOTLP turns what a log pipeline received of agentd's shipped journal (the Collector's
// file exporter output: one OTLP/JSON ExportLogsServiceRequest a line) into an export the
// multi-host commands read: one Entry a line, by host then sequence number. Receivers see
// duplicates (a record is shipped at least once, and its service.instance.id + agentd.seq name
// it): an identical one is written once, but two that differ under the same name are both
// written, marked, and reported through warn (nil: not reported) naming both. Records of other
// services are skipped; a line that is not OTLP/JSON is an error naming it. Records are read one
// at a time (see jsonLine): memory is one record's and the records imported, never a line's.
// It returns how many entries it wrote.
func ImportOTLP(r io.Reader, w io.Writer, warn func(string)) (int, error) {
	imp := otlpImport{set: newRecordSet()}
	br := bufio.NewReaderSize(r, 64<<10)
	for n := 1; ; n++ {
		if _, err := br.Peek(1); err == io.EOF {
			break
		} else if err != nil {
			return 0, err
		}
		if err := imp.line(newJSONLine(n, br)); err != nil {
			return 0, err
		}
	}
	out, conflicts := imp.set.result(func(o origin) string { return fmt.Sprintf("line %d record %d", o.line, o.record) })
	tell(warn, conflicts)
	seqOf := func(e Entry) uint64 { return max(e.Seq, e.SeqFrom) }
	slices.SortStableFunc(out, func(a, b Entry) int { return cmp.Or(cmp.Compare(a.Host, b.Host), cmp.Compare(seqOf(a), seqOf(b))) })
	enc := json.NewEncoder(w)
	for _, e := range out {
		if err := enc.Encode(e); err != nil {
			return 0, err
		}
	}
	return len(out), nil
}

// otlpImport reads requests into its record set.
type otlpImport struct {
	set    *recordSet
	record int // log records met on the current line
}

// line reads one request: {"resourceLogs": [...]} (protojson also reads proto field names).
func (imp *otlpImport) line(l *jsonLine) error {
	imp.record = 0
	err := l.object("the request", func(key string) error {
		if key != "resourceLogs" && key != "resource_logs" {
			return l.skip()
		}
		return l.array(key, func() error { return imp.resourceLogs(l) })
	})
	switch {
	case err == io.EOF && !l.started:
		return nil // a blank line
	case errors.Is(err, errRefused):
		return err
	case errors.Is(err, errOverBound):
		return l.refuse(fmt.Sprintf("after record %d", imp.record))
	case err == io.EOF:
		return fmt.Errorf("line %d: not OTLP/JSON logs: the line ends inside the request", l.n)
	case err != nil:
		return fmt.Errorf("line %d: not OTLP/JSON logs: %w", l.n, err)
	}
	return l.end()
}

// MaxOTLPWaiting bounds the log records of one resource held while its resource has not come
// yet (JSON keeps no order; the Collector writes the resource first): counted as their JSON and
// what each costs held, they may fill four of agentd's 1 MiB batches (PROTOCOL.md §5) — a
// resource of more records before it is refused, naming the line and the record.
const MaxOTLPWaiting = 4 << 20

// resourceLogs reads one resource's records; the resource may come after them (JSON keeps no
// order), so its records wait for it, those not agentd's at all (no record type) dropped
// first, at most MaxOTLPWaiting of them.
func (imp *otlpImport) resourceLogs(l *jsonLine) error {
	var host string
	var known bool
	var waiting []pending
	waitingBytes := 0
	keep := func(e Entry, o origin, size int) error {
		if known {
			if host != "" {
				e.Host = host
				imp.set.add(e, o)
			}
			return nil
		}
		if waitingBytes += size + int(unsafe.Sizeof(pending{})); waitingBytes > MaxOTLPWaiting {
			return fmt.Errorf("line %d, record %d: more than %d MiB of log records wait for their resource, which has not come yet on the line: the bound on records held for it (agentd's shipper sends at most 1 MiB a request, its resource first): %w",
				l.n, o.record, MaxOTLPWaiting>>20, errRefused)
		}
		waiting = append(waiting, pending{e, o})
		return nil
	}
	err := l.object("resourceLogs", func(key string) error {
		switch key {
		case "resource":
			raw, err := l.value()
			if err != nil {
				return err
			}
			var res resourcepb.Resource
			if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(nullAsEmpty(raw), &res); err != nil {
				return fmt.Errorf("resource: %w", err)
			}
			if str(res.Attributes, "service.name") == "agentd" {
				host = str(res.Attributes, "service.instance.id")
			}
			known = true
			for _, p := range waiting {
				_ = keep(p.e, p.o, 0) // known: kept, never refused
			}
			waiting = nil
			return nil
		case "scopeLogs", "scope_logs":
			return l.array(key, func() error {
				return l.object("scopeLogs", func(key string) error {
					if key != "logRecords" && key != "log_records" {
						return l.skip()
					}
					return l.array(key, func() error {
						imp.record++
						e, size, err := imp.logRecord(l)
						if errors.Is(err, errOverBound) {
							return l.refuse(fmt.Sprintf("record %d", imp.record))
						}
						if err == nil && size > 0 {
							err = keep(e, origin{line: int32(l.n), record: int32(imp.record)}, size)
						}
						return err
					})
				})
			})
		}
		return l.skip()
	})
	return err // records still waiting had no resource, so no service.name: not agentd's
}

type pending struct {
	e Entry
	o origin
}

// logRecord reads one log record as an Entry (its host set by the caller), and the size of its
// JSON; the size is 0 for a record that is not one of agentd's journal records.
func (imp *otlpImport) logRecord(l *jsonLine) (Entry, int, error) {
	raw, err := l.value()
	if err != nil {
		return Entry{}, 0, err
	}
	if !bytes.Contains(raw, []byte(otlpship.AttrType)) && !bytes.Contains(raw, []byte(`\u`)) {
		// Without its type attribute (its key unescaped or escaped) a record is none of
		// agentd's: a line of millions of such records costs no decoding.
		return Entry{}, 0, nil
	}
	var lr logspb.LogRecord
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(nullAsEmpty(raw), &lr); err != nil {
		return Entry{}, 0, fmt.Errorf("record %d: %w", imp.record, err)
	}
	a := lr.Attributes
	e := Entry{Seq: uint64(integer(a, otlpship.AttrSeq)), Time: time.Unix(0, int64(lr.TimeUnixNano)).UTC(),
		Type: str(a, otlpship.AttrType), Task: str(a, otlpship.AttrTask), Container: str(a, otlpship.AttrContainer),
		From: str(a, otlpship.AttrStatusFrom), To: str(a, otlpship.AttrStatusTo), Reason: str(a, otlpship.AttrReason),
		ChangeID: str(a, otlpship.AttrChangeID), MessageID: str(a, otlpship.AttrMessageID), ImageDigest: str(a, otlpship.AttrImageDigest),
		Severity: lr.SeverityText, SeqFrom: uint64(integer(a, otlpship.AttrSeqFrom)), SeqTo: uint64(integer(a, otlpship.AttrSeqTo))}
	if v, ok := attrOf(a, otlpship.AttrExitCode); ok {
		c := v.GetIntValue()
		e.ExitCode = &c
	}
	// An Entry's Text is the details, whichever agent shipped it (1.3 ships the whole dump line).
	e.Text = otlpship.BodyDetails(lr.GetBody().GetStringValue(), e.Type, e.Task, e.Container)
	if e.Type == "" {
		return Entry{}, 0, nil
	}
	return e, len(raw), nil
}

// nullAsEmpty reads a JSON null as an empty message, as protojson does for a field.
func nullAsEmpty(raw json.RawMessage) []byte {
	if string(raw) == "null" {
		return []byte("{}")
	}
	return raw
}

func attrOf(kvs []*commonpb.KeyValue, key string) (*commonpb.AnyValue, bool) {
	for _, kv := range kvs {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return nil, false
}

func str(kvs []*commonpb.KeyValue, key string) string {
	v, _ := attrOf(kvs, key)
	return v.GetStringValue()
}

func integer(kvs []*commonpb.KeyValue, key string) int64 {
	v, _ := attrOf(kvs, key)
	return v.GetIntValue()
}
