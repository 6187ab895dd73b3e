package fsm_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
)

// TestALongMessageIDIsHeldByItsDigest: PROTOCOL §2 sets no length for a message id, and the
// journal remembers an id until its retention ends. A control plane's 1 MiB ids are held as
// their digest (event.MessageKey): a payload's records carry 135 bytes, not the id, and a
// re-send of the id is still a duplicate — also where the journal, written before the digest,
// holds the id as sent. A short id is held as sent.
func TestALongMessageIDIsHeldByItsDigest(t *testing.T) {
	long := strings.Repeat("m", 1<<20)
	task := json.RawMessage(`{"arn":"task/1","desired_status":"RUNNING","containers":[{"name":"app","image":"img"}]}`)
	now := time.Unix(1_000_000, 0)
	for _, tc := range []struct {
		name    string
		id      string
		journal string // the id its payload_received holds
	}{
		{name: "a short id is held as sent", id: "m-000017", journal: "m-000017"},
		{name: "an id of the longest kept as sent", id: strings.Repeat("x", event.MaxMessageIDBytes), journal: strings.Repeat("x", event.MaxMessageIDBytes)},
		{name: "a long id is held as its digest", id: long, journal: event.MessageKey(long)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := fsm.New()
			v := st.Step(now, fsm.PayloadArrived{MessageID: tc.id, Tasks: []json.RawMessage{task}})
			if len(v.Records) != 2 {
				t.Fatalf("the payload made %d records, want payload_received and task_added", len(v.Records))
			}
			for _, r := range v.Records {
				if got := event.MessageOf(r.Event); got != tc.journal {
					t.Fatalf("%s holds message id of %d bytes (%.20q…), want %d bytes", r.Type(), len(got), got, len(tc.journal))
				}
				apply(t, st, r)
			}
			if again := st.Step(now, fsm.PayloadArrived{MessageID: tc.id, Tasks: []json.RawMessage{task}}); !again.Duplicate || len(again.Records) != 0 {
				t.Fatalf("the payload sent again is not a duplicate: %+v", again)
			}
		})
	}
	if k := event.MessageKey(long); len(k) <= event.MaxMessageIDBytes || !strings.HasPrefix(k, "sha512:") {
		t.Fatalf("MessageKey of a long id = %q", k)
	}

	t.Run("a long id held as sent by an older journal is still held", func(t *testing.T) {
		st := fsm.New()
		apply(t, st, event.Record{Event: &event.PayloadReceived{MessageID: long}})
		if again := st.Step(now, fsm.PayloadArrived{MessageID: long, Tasks: []json.RawMessage{task}}); !again.Duplicate {
			t.Fatalf("a re-send of an id the journal holds as sent is applied again: %+v", again)
		}
	})
}

// attack31: a short id is held as sent, and a long one was held as "sha256:<hex>" — the same space. A
// control plane whose own ids have that form (content-addressed ids, a proxy shortening long
// ids) sends a payload under id S equal to the key of a long id L it sent before: S is taken
// for a re-send of L, acknowledged, and its tasks never applied (invariant 3). Either order.
func TestAShortIDShapedLikeADigestIsNotALongIDsReSend(t *testing.T) {
	long := strings.Repeat("m", 200)
	sum := sha256.Sum256([]byte(long))
	short := "sha256:" + hex.EncodeToString(sum[:]) // 71 bytes, held as sent: the key b8462af gave long
	now := time.Unix(1_000_000, 0)
	taskOf := func(arn string) json.RawMessage {
		return json.RawMessage(`{"arn":"` + arn + `","desired_status":"RUNNING","containers":[{"name":"app","image":"img"}]}`)
	}
	for _, order := range [][2]string{{long, short}, {short, long}} {
		st := fsm.New()
		v := st.Step(now, fsm.PayloadArrived{MessageID: order[0], Tasks: []json.RawMessage{taskOf("task/1")}})
		for _, r := range v.Records {
			apply(t, st, r)
		}
		if v2 := st.Step(now, fsm.PayloadArrived{MessageID: order[1], Tasks: []json.RawMessage{taskOf("task/2")}}); v2.Duplicate {
			t.Fatalf("payload %.12q… (task/2) taken as a re-send of %.12q…: acknowledged, never applied", order[1], order[0])
		}
	}
}
