package otlpship

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"

	"github.com/agentd/agentd/internal/event"
)

// GapType is the agentd.record.type of the record that announces sequence numbers that will
// never be shipped (compaction removed them first, or the endpoint refused their batch).
const GapType = "gap"

// maxField bounds every string shipped, so one record always fits a batch of 1 MiB whatever
// the control plane put in a name or reason.
const maxField = 16 << 10

// Attribute keys (PROTOCOL.md §5).
const (
	AttrSeq         = "agentd.seq"
	AttrType        = "agentd.record.type"
	AttrTask        = "agentd.task.arn"
	AttrContainer   = "agentd.container.name"
	AttrStatusFrom  = "agentd.status.from"
	AttrStatusTo    = "agentd.status.to"
	AttrChangeID    = "agentd.change.id"
	AttrExitCode    = "agentd.exit_code"
	AttrReason      = "agentd.reason"
	AttrMessageID   = "agentd.message.id"
	AttrImageDigest = "agentd.image.digest"
	AttrSeqFrom     = "agentd.seq.from"
	AttrSeqTo       = "agentd.seq.to"
)

// LogRecord maps one journal record to its OTLP log record (PROTOCOL.md §5). Only the fields
// listed there are read from the event: a field that carries a sealed value (environment
// values, in TaskAdded and PayloadReceived) is never read here, so it cannot be shipped.
func LogRecord(r event.Record, observed time.Time) *logspb.LogRecord {
	lr := &logspb.LogRecord{
		TimeUnixNano:         unixNano(r.Time),
		ObservedTimeUnixNano: unixNano(observed),
		Body:                 str(clip(event.Line(r, 0, 0))), // never empty: type and subject lead
	}
	setSeverity(lr, warns(r.Event))
	add := func(k string, v *commonpb.AnyValue) {
		lr.Attributes = append(lr.Attributes, &commonpb.KeyValue{Key: k, Value: v})
	}
	addStr := func(k, v string) {
		if v != "" {
			add(k, str(clip(v)))
		}
	}
	add(AttrSeq, integer(int64(r.Seq)))
	addStr(AttrType, r.Type().String())
	addStr(AttrTask, r.Task)
	addStr(AttrContainer, r.Container)
	switch e := r.Event.(type) {
	case *event.ContainerTransitioned:
		addStr(AttrStatusFrom, string(e.From))
		addStr(AttrStatusTo, string(e.To))
		if e.ExitCode != nil {
			add(AttrExitCode, integer(int64(*e.ExitCode)))
		}
		addStr(AttrReason, e.Reason)
		addStr(AttrImageDigest, e.ImageDigest)
	case *event.TaskTransitioned:
		addStr(AttrStatusFrom, string(e.From))
		addStr(AttrStatusTo, string(e.To))
		addStr(AttrReason, e.Reason)
	case *event.StoppedAcked:
		addStr(AttrChangeID, e.ChangeID)
		addStr(AttrReason, e.Rejected)
	case *event.PayloadReceived:
		addStr(AttrMessageID, e.MessageID)
	case *event.TaskAdded:
		addStr(AttrMessageID, e.MessageID)
	case *event.TaskRejected:
		addStr(AttrMessageID, e.MessageID)
		addStr(AttrReason, e.Reason)
	case *event.TaskResent:
		addStr(AttrMessageID, e.MessageID)
	case *event.DesiredChanged:
		addStr(AttrMessageID, e.MessageID)
	case *event.RecordRefused: // INFO: §5 names no refusal among the WARNs
		addStr(AttrMessageID, e.MessageID)
		addStr(AttrReason, e.Reason)
	case *event.CallEnded:
		addStr(AttrReason, e.Reason)
	case *event.AgentStopped:
		addStr(AttrReason, e.Reason)
	case *event.ImageRemoved:
		addStr(AttrImageDigest, e.Digest)
		addStr(AttrReason, e.Reason)
	}
	return lr
}

// BodyDetails is what a shipped body says after the record's type and subject, given as its
// attributes name them: the details `journal dump` prints after the subject. A body shipped
// before PROTOCOL 1.3 held the details alone and is returned as it is.
func BodyDetails(body, typ, task, container string) string {
	head := typ + " " + event.Subject(task, container)
	if body == head {
		return ""
	}
	if d, ok := strings.CutPrefix(body, head+" "); ok {
		return d
	}
	return body
}

// GapRecord announces that records from..to (inclusive) will never be shipped, and why.
func GapRecord(from, to uint64, why string, now time.Time) *logspb.LogRecord {
	lr := &logspb.LogRecord{
		TimeUnixNano:         unixNano(now),
		ObservedTimeUnixNano: unixNano(now),
		Body:                 str(fmt.Sprintf("records %d..%d not shipped: %s", from, to, why)),
		Attributes: []*commonpb.KeyValue{
			{Key: AttrType, Value: str(GapType)},
			{Key: AttrSeqFrom, Value: integer(int64(from))},
			{Key: AttrSeqTo, Value: integer(int64(to))},
			{Key: AttrReason, Value: str(why)},
		},
	}
	setSeverity(lr, true)
	return lr
}

// warns is §5's severity rule: WARN for a STOPPED with a non-zero exit code or a failure
// reason, and for a failed runtime call; INFO otherwise.
func warns(e event.Event) bool {
	switch e := e.(type) {
	case *event.ContainerTransitioned:
		return e.To == event.StatusStopped && ((e.ExitCode != nil && *e.ExitCode != 0) || failure(e.Reason))
	case *event.TaskTransitioned:
		return e.To == event.StatusStopped && failure(e.Reason)
	case *event.CallEnded:
		return true // a call in flight that ended without effect: it failed or never ran
	}
	return false
}

// orderlyStops are the reasons of a stop somebody asked for (the fsm's wording): every other
// reason on a STOPPED names a failure.
var orderlyStops = []string{"stopped by the control plane", "desired status STOPPED on arrival", "all containers stopped"}

func failure(reason string) bool {
	if reason == "" {
		return false
	}
	r := strings.TrimPrefix(reason, "stopped by agentd: ")
	for _, o := range orderlyStops {
		if r == o {
			return false
		}
	}
	return true
}

func setSeverity(lr *logspb.LogRecord, warn bool) {
	if warn {
		lr.SeverityText, lr.SeverityNumber = "WARN", logspb.SeverityNumber_SEVERITY_NUMBER_WARN
	} else {
		lr.SeverityText, lr.SeverityNumber = "INFO", logspb.SeverityNumber_SEVERITY_NUMBER_INFO
	}
}

func unixNano(t time.Time) uint64 {
	if t.IsZero() || t.UnixNano() < 0 {
		return 0
	}
	return uint64(t.UnixNano())
}

func str(s string) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: s}}
}

func integer(v int64) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v}}
}

// clip keeps at most maxField bytes of valid UTF-8 (protobuf strings must be), marking the cut.
func clip(s string) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if len(s) <= maxField {
		return s
	}
	cut := maxField
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…(clipped)"
}
