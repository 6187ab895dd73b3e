package otlpship

import (
	"bytes"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/journal"
)

// The shipper writes the request's protobuf bytes itself, straight from the journal's stored
// records, instead of building a LogRecord message of ~40 objects a record and marshalling it
// through reflection: on a 2-core host the shipper shares the CPU with the appenders, and that
// building cost ~10 µs and 3 KB of garbage a record (bench journal: shipping on 0.80x of off).
// LogRecord stays the mapping's one definition: what a record's event contributes (severity,
// body, its attributes) is taken from LogRecord and kept encoded per distinct event body, and
// TestEncodedRecordsAreLogRecordsMarshalled holds the bytes equal to proto.Marshal's.

// Field numbers of opentelemetry-proto (collector/logs/v1, logs/v1, common/v1).
const (
	fieldRequestResourceLogs = 1 // ExportLogsServiceRequest.resource_logs
	fieldResourceLogsRes     = 1 // ResourceLogs.resource
	fieldResourceLogsScope   = 2 // ResourceLogs.scope_logs
	fieldScopeLogsScope      = 1 // ScopeLogs.scope
	fieldScopeLogsRecords    = 2 // ScopeLogs.log_records
	fieldLogTime             = 1 // LogRecord.time_unix_nano (fixed64)
	fieldLogBody             = 5 // LogRecord.body (AnyValue)
	fieldLogAttributes       = 6 // LogRecord.attributes
	fieldLogObserved         = 11
	fieldKeyValueKey         = 1
	fieldKeyValueValue       = 2
	fieldAnyString           = 1 // AnyValue.string_value
	fieldAnyInt              = 3 // AnyValue.int_value
)

// eventPart is what one event contributes to its log record, encoded: severity (fields 2
// and 3), the type name and details that frame the body around the record's subject, the
// record type's attribute, and the event's own attributes, which follow the task's and the
// container's (LogRecord's order).
type eventPart struct {
	severity, typeAttr, tail []byte
	typeName, details        string // the body is typeName, " ", the subject, then details
}

// Bounds of the event parts kept: many records share a body (a transition without an exit code
// or a reason is the same bytes for every task), and a body larger than this is seldom shared.
const (
	maxEventParts    = 256
	maxSharedBodyLen = 256
)

// encoder turns stored records into encoded LogRecords. It is the shipper's own (one
// goroutine) and reuses its buffers from batch to batch.
type encoder struct {
	parts map[string]*eventPart // by record type and body bytes
	key   []byte
	rec   []byte // the record being encoded
	body  []byte // its body's text
}

func newEncoder() *encoder { return &encoder{parts: make(map[string]*eventPart)} }

// part is the record's event's contribution, decoded and mapped once per distinct body.
func (e *encoder) part(r journal.RawRecord) (*eventPart, error) {
	e.key = append(append(e.key[:0], byte(r.Type>>8), byte(r.Type)), r.Body...)
	if p, ok := e.parts[string(e.key)]; ok {
		return p, nil
	}
	ev, err := r.Event()
	if err != nil {
		return nil, err
	}
	p := newEventPart(ev)
	if len(r.Body) <= maxSharedBodyLen {
		if len(e.parts) >= maxEventParts {
			clear(e.parts)
		}
		e.parts[string(e.key)] = p
	}
	return p, nil
}

// newEventPart maps ev alone through LogRecord (no sequence, task, container or times) and
// keeps the encoded pieces: whatever LogRecord ships of an event, and only that, is shipped.
func newEventPart(ev event.Event) *eventPart {
	lr := LogRecord(event.Record{Event: ev}, time.Time{})
	p := &eventPart{typeName: ev.Type().String()}
	p.severity, _ = proto.Marshal(&logspb.LogRecord{SeverityNumber: lr.SeverityNumber, SeverityText: lr.SeverityText})
	// What event.Line puts after a record's subject, taken unclipped from a record without one.
	p.details = strings.TrimPrefix(event.Line(event.Record{Event: ev}, 0, 0), p.typeName+" -")
	for _, kv := range lr.Attributes {
		b, _ := proto.Marshal(kv)
		switch kv.Key {
		case AttrSeq: // the record's own, encoded per record
		case AttrType:
			p.typeAttr = appendBytesField(p.typeAttr, fieldLogAttributes, b)
		default:
			p.tail = appendBytesField(p.tail, fieldLogAttributes, b)
		}
	}
	return p
}

// appendRecord appends r's LogRecord as a ScopeLogs.log_records field to dst: the bytes
// proto.Marshal(LogRecord(r, observed)) makes, framed. It returns the record's encoded size too.
func (e *encoder) appendRecord(dst []byte, r journal.RawRecord, observed time.Time) ([]byte, int, error) {
	p, err := e.part(r)
	if err != nil {
		return dst, 0, err
	}
	b := e.rec[:0]
	if t := unixNano(r.Time); t != 0 {
		b = protowire.AppendTag(b, fieldLogTime, protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, t)
	}
	b = append(b, p.severity...)
	e.body = appendSubject(append(append(e.body[:0], p.typeName...), ' '), r.Task, r.Container)
	e.body = append(e.body, p.details...)
	if len(e.body) > maxField {
		e.body = append(e.body[:0], clip(string(e.body))...)
	}
	b = protowire.AppendTag(b, fieldLogBody, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(protowire.SizeTag(fieldAnyString)+protowire.SizeBytes(len(e.body))))
	b = appendBytesField(b, fieldAnyString, e.body)
	b = appendIntAttr(b, AttrSeq, int64(r.Seq))
	b = append(b, p.typeAttr...)
	b = appendStrAttr(b, AttrTask, r.Task)
	b = appendStrAttr(b, AttrContainer, r.Container)
	b = append(b, p.tail...)
	if t := unixNano(observed); t != 0 {
		b = protowire.AppendTag(b, fieldLogObserved, protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, t)
	}
	e.rec = b
	return appendBytesField(dst, fieldScopeLogsRecords, b), len(b), nil
}

// appendGap appends a gap record as a ScopeLogs.log_records field: rare, so built as a message.
// Its strings are the shipper's own, valid UTF-8: marshalling it cannot fail.
func appendGap(dst []byte, m *logspb.LogRecord) []byte {
	b, _ := proto.Marshal(m)
	return appendBytesField(dst, fieldScopeLogsRecords, b)
}

// appendSubject appends event.Subject(task, container) without making strings of them: an
// identifier of visible ASCII other than a quote or a backslash is printed as it is (the
// records an agent writes); any other goes through event.Printable.
func appendSubject(dst, task, container []byte) []byte {
	if len(task) == 0 {
		dst = append(dst, '-')
	} else {
		dst = appendPrintable(dst, task)
	}
	if len(container) > 0 {
		dst = appendPrintable(append(dst, '/'), container)
	}
	return dst
}

func appendPrintable(dst, id []byte) []byte {
	for _, c := range id {
		if c <= ' ' || c >= 0x7f || c == '"' || c == '\\' {
			return append(dst, event.Printable(string(id))...)
		}
	}
	return append(dst, id...)
}

// appendStrAttr appends a string attribute when v is not empty, clipped as LogRecord clips.
func appendStrAttr(dst []byte, key string, v []byte) []byte {
	if len(v) == 0 {
		return dst
	}
	if len(v) > maxField || !utf8.Valid(v) {
		v = []byte(clip(string(v)))
	}
	dst = appendAttrHead(dst, key, protowire.SizeTag(fieldAnyString)+protowire.SizeBytes(len(v)))
	return appendBytesField(dst, fieldAnyString, v)
}

func appendIntAttr(dst []byte, key string, v int64) []byte {
	dst = appendAttrHead(dst, key, protowire.SizeTag(fieldAnyInt)+protowire.SizeVarint(uint64(v)))
	dst = protowire.AppendTag(dst, fieldAnyInt, protowire.VarintType)
	return protowire.AppendVarint(dst, uint64(v))
}

// appendAttrHead appends an attribute (LogRecord.attributes, a KeyValue) up to its AnyValue's
// contents, which take valueLen bytes and follow.
func appendAttrHead(dst []byte, key string, valueLen int) []byte {
	kvLen := protowire.SizeTag(fieldKeyValueKey) + protowire.SizeBytes(len(key)) + protowire.SizeTag(fieldKeyValueValue) + protowire.SizeBytes(valueLen)
	dst = protowire.AppendTag(dst, fieldLogAttributes, protowire.BytesType)
	dst = protowire.AppendVarint(dst, uint64(kvLen))
	dst = protowire.AppendTag(dst, fieldKeyValueKey, protowire.BytesType)
	dst = protowire.AppendString(dst, key)
	dst = protowire.AppendTag(dst, fieldKeyValueValue, protowire.BytesType)
	return protowire.AppendVarint(dst, uint64(valueLen))
}

func appendBytesField(dst []byte, num protowire.Number, b []byte) []byte {
	dst = protowire.AppendTag(dst, num, protowire.BytesType)
	return protowire.AppendBytes(dst, b)
}

// envelope is the request around the log records, encoded once: the resource and the scope.
type envelope struct{ resource, scope []byte }

func newEnvelope(res *resourcepb.Resource, scope *commonpb.InstrumentationScope) envelope {
	r, _ := proto.Marshal(res)
	s, _ := proto.Marshal(scope)
	return envelope{r, s}
}

// request appends to dst the ExportLogsServiceRequest holding the encoded log_records fields
// recs.
func (e envelope) request(dst, recs []byte) []byte {
	scopeLogs := protowire.SizeTag(fieldScopeLogsScope) + protowire.SizeBytes(len(e.scope)) + len(recs)
	resourceLogs := protowire.SizeTag(fieldResourceLogsRes) + protowire.SizeBytes(len(e.resource)) +
		protowire.SizeTag(fieldResourceLogsScope) + protowire.SizeBytes(scopeLogs)
	out := slices.Grow(dst, protowire.SizeTag(fieldRequestResourceLogs)+protowire.SizeBytes(resourceLogs))
	out = protowire.AppendTag(out, fieldRequestResourceLogs, protowire.BytesType)
	out = protowire.AppendVarint(out, uint64(resourceLogs))
	out = appendBytesField(out, fieldResourceLogsRes, e.resource)
	out = protowire.AppendTag(out, fieldResourceLogsScope, protowire.BytesType)
	out = protowire.AppendVarint(out, uint64(scopeLogs))
	out = appendBytesField(out, fieldScopeLogsScope, e.scope)
	return append(out, recs...)
}

// requestBody is a request's bytes, reused for a later batch once the HTTP client has closed
// every reader of them: a batch's ~100 KB are then not a fresh allocation each time (the
// client may close a request's body after Do returns, so returning is not enough).
type requestBody struct {
	buf  []byte
	open atomic.Int32 // readers handed to the HTTP client and not yet closed
}

// reader is one attempt's body.
func (b *requestBody) reader() io.ReadCloser {
	b.open.Add(1)
	return &bodyReader{Reader: bytes.NewReader(b.buf), b: b}
}

type bodyReader struct {
	*bytes.Reader
	b    *requestBody
	once sync.Once
}

func (r *bodyReader) Close() error {
	r.once.Do(func() { r.b.open.Add(-1) })
	return nil
}
