package forensics

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"time"

	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/agentd/agentd/internal/otlpship"
)

// ImportOTLP turns what a log pipeline received of agentd's shipped journal (the Collector's
// file exporter output: one OTLP/JSON ExportLogsServiceRequest a line) into an export the
// multi-host commands read: one Entry a line, each record once (receivers see duplicates: a
// record is shipped at least once, and its service.instance.id + agentd.seq name it), by host
// then sequence number. Records of other services are skipped; a line that is not OTLP/JSON is
// an error naming it. It returns how many entries it wrote.
func ImportOTLP(r io.Reader, w io.Writer) (int, error) {
	type key struct {
		host          string
		seq, from, to uint64
	}
	seen := map[key]bool{}
	var out []Entry
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 256<<20)
	un := protojson.UnmarshalOptions{DiscardUnknown: true}
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var req collogspb.ExportLogsServiceRequest
		if err := un.Unmarshal(line, &req); err != nil {
			return 0, fmt.Errorf("line %d: not OTLP/JSON logs: %w", n, err)
		}
		for _, rl := range req.ResourceLogs {
			res := rl.GetResource().GetAttributes()
			if str(res, "service.name") != "agentd" {
				continue
			}
			host := str(res, "service.instance.id")
			for _, sl := range rl.ScopeLogs {
				for _, lr := range sl.LogRecords {
					a := lr.Attributes
					e := Entry{Host: host, Seq: uint64(integer(a, otlpship.AttrSeq)), Time: time.Unix(0, int64(lr.TimeUnixNano)).UTC(),
						Type: str(a, otlpship.AttrType), Task: str(a, otlpship.AttrTask), Container: str(a, otlpship.AttrContainer),
						From: str(a, otlpship.AttrStatusFrom), To: str(a, otlpship.AttrStatusTo), Reason: str(a, otlpship.AttrReason),
						ChangeID: str(a, otlpship.AttrChangeID), MessageID: str(a, otlpship.AttrMessageID), ImageDigest: str(a, otlpship.AttrImageDigest),
						Severity: lr.SeverityText, SeqFrom: uint64(integer(a, otlpship.AttrSeqFrom)), SeqTo: uint64(integer(a, otlpship.AttrSeqTo)),
					}
					e.Text = otlpship.BodyDetails(lr.GetBody().GetStringValue(), e.Type, e.Task, e.Container)
					if v, ok := attrOf(a, otlpship.AttrExitCode); ok {
						c := v.GetIntValue()
						e.ExitCode = &c
					}
					if e.Type == "" || host == "" {
						continue // not one of agentd's journal records
					}
					k := key{host, e.Seq, e.SeqFrom, e.SeqTo}
					if seen[k] {
						continue
					}
					seen[k] = true
					out = append(out, e)
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	sortByHostSeq(out)
	enc := json.NewEncoder(w)
	for _, e := range out {
		if err := enc.Encode(e); err != nil {
			return 0, err
		}
	}
	return len(out), nil
}

func sortByHostSeq(es []Entry) {
	seqOf := func(e Entry) uint64 { return max(e.Seq, e.SeqFrom) }
	slices.SortStableFunc(es, func(a, b Entry) int { return cmp.Or(cmp.Compare(a.Host, b.Host), cmp.Compare(seqOf(a), seqOf(b))) })
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
