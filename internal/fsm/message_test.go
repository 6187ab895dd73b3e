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

// A payload's id leaves the table of ids when a task it held is cleaned and moves into that
// task's tombstone (a remembered task then costs no table entry of its own, issue 41); a
// re-send of the payload is still recognised by the task it holds — also after a restart, and
// also where the payload held another task that is still live — acknowledged, never applied
// twice. Another payload naming the same task is not taken for it. (A journal that applies it
// twice is not refused: a build before issue 41 forgot the id a retention after the payload
// came, its tombstone kept, and then rightly applied a re-send again.)
func TestAPayloadOfACleanedTaskIsStillADuplicate(t *testing.T) {
	st := remembered(t, 1)
	arn, id := "arn:aws:ecs:eu-west-1:123456789012:task/rem/00000000", "m-000000"
	task := json.RawMessage(`{"arn":"` + arn + `","desired_status":"RUNNING","containers":[{"name":"app","image":"x"}]}`)
	if _, held := st.Messages[id]; held || len(st.Messages) != 0 {
		t.Fatalf("the table still holds %v after the payload's only task was cleaned", st.Messages)
	}
	snap, err := st.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	restored, err := fsm.Restore(snap)
	if err != nil {
		t.Fatal(err)
	}
	now := st.LastTime.Add(time.Second)
	for name, s := range map[string]*fsm.State{"live": st, "restored": restored} {
		again := s.Step(now, fsm.PayloadArrived{MessageID: id, Tasks: []json.RawMessage{task}})
		if !again.Duplicate || len(again.Records) != 1 || again.Records[0].Type() != event.TypeTaskResent {
			t.Errorf("%s: the payload sent again: duplicate %v, records %v; want a duplicate, its STOPPED reported again", name, again.Duplicate, again.Records)
		}
		other := s.Step(now, fsm.PayloadArrived{MessageID: "m-other", Tasks: []json.RawMessage{task}})
		if other.Duplicate || len(other.Records) != 2 {
			t.Errorf("%s: another payload naming the task: duplicate %v, %d records; want it applied (received, re-sent)", name, other.Duplicate, len(other.Records))
		}
	}
}

// A journal a build before issue 41 wrote may forget a payload's id a retention after it came
// while its cleaned task's tombstone stays (compaction_done), then apply a re-send of it again:
// replayed now, where the id moved into the tombstone, that journal still replays.
func TestAnOlderJournalsSecondPayloadStillReplays(t *testing.T) {
	st := remembered(t, 1)
	id := "m-000000"
	task := json.RawMessage(`{"arn":"arn:aws:ecs:eu-west-1:123456789012:task/rem/00000000","desired_status":"RUNNING","containers":[{"name":"app","image":"x"}]}`)
	for _, e := range []event.Event{&event.CompactionDone{UpToSeq: 2, Messages: []string{id}}, &event.PayloadReceived{MessageID: id, Tasks: []json.RawMessage{task}}} {
		if err := st.Apply(event.Record{Seq: st.LastSeq + 1, Time: st.LastTime.Add(time.Second), Event: e}); err != nil {
			t.Fatalf("%s: %v", e.Type(), err)
		}
	}
}
