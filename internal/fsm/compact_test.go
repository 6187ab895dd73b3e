package fsm_test

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
)

// What a compaction may forget, planned from the projection and the journal's facts alone:
// each row is a rule recovery or the duplicate guard depends on, and what breaking it loses.
func TestPlanCompaction(t *testing.T) {
	now := time.Date(2026, 1, 10, 0, 0, 0, 0, time.UTC)
	old, recent := now.Add(-10*24*time.Hour), now.Add(-time.Hour)
	tomb := func(cleaned time.Time, seq uint64) *fsm.Tombstone {
		return fsm.TombstoneOf(cleaned.UnixNano(), seq, seq-1)
	}
	week := fsm.CompactionPolicy{Retention: 7 * 24 * time.Hour}
	for _, tc := range []struct {
		name       string
		tombs      map[string]*fsm.Tombstone
		messages   map[string]uint64
		live       []string // message ids a live task holds
		pol        fsm.CompactionPolicy
		facts      fsm.JournalFacts
		wantUpTo   uint64
		wantTasks  []string
		wantMsgs   []string
		wantEarly  []string
		overBudget bool
	}{
		{name: "no snapshot kept at or before the newest: nothing", pol: week,
			tombs: map[string]*fsm.Tombstone{"a": tomb(old, 5)}, facts: fsm.JournalFacts{Snapshots: []uint64{300}, Newest: 200, HorizonSeq: 300}},
		{name: "past the retention and before the cut: its history goes", pol: week,
			tombs: map[string]*fsm.Tombstone{"a": tomb(old, 50), "b": tomb(recent, 60)}, facts: fsm.JournalFacts{Snapshots: []uint64{200}, Newest: 200, HorizonSeq: 150},
			wantUpTo: 200, wantTasks: []string{"a"}},
		{name: "the cut never passes the oldest snapshot kept (the fallback)", pol: week,
			tombs: map[string]*fsm.Tombstone{"a": tomb(old, 90), "b": tomb(old, 150)}, facts: fsm.JournalFacts{Snapshots: []uint64{100, 200}, Newest: 200, HorizonSeq: 300},
			wantUpTo: 100, wantTasks: []string{"a"}},
		{name: "a payload that holds a live task stays recognised", pol: week, live: []string{"m-live"},
			messages: map[string]uint64{"m-live": 10, "m-old": 11, "m-new": 180}, facts: fsm.JournalFacts{Snapshots: []uint64{200}, Newest: 200, HorizonSeq: 150},
			wantUpTo: 200, wantMsgs: []string{"m-old"}},
		{name: "kept forever: nothing goes by time", pol: fsm.CompactionPolicy{Retention: -1},
			tombs: map[string]*fsm.Tombstone{"a": tomb(old, 50)}, messages: map[string]uint64{"m": 10}, facts: fsm.JournalFacts{Snapshots: []uint64{200}, Newest: 200},
			wantUpTo: 200},
		{name: "over budget: the oldest cleaned go early, their tombstones kept", pol: fsm.CompactionPolicy{Retention: -1, MaxBytes: 1000},
			tombs: map[string]*fsm.Tombstone{"a": tomb(recent, 50), "b": tomb(recent, 40), "c": tomb(recent, 60), "d": tomb(recent, 70)},
			facts: fsm.JournalFacts{Snapshots: []uint64{200}, Newest: 200, InUse: 1200}, wantUpTo: 200, wantEarly: []string{"a", "b"}}, // 300 bytes a history; 400 to go to reach 80%,
		{name: "within budget: nothing early", pol: fsm.CompactionPolicy{Retention: -1, MaxBytes: 1000},
			tombs: map[string]*fsm.Tombstone{"a": tomb(recent, 50)}, facts: fsm.JournalFacts{Snapshots: []uint64{200}, Newest: 200, InUse: 900}, wantUpTo: 200},
		{name: "live history alone over budget: said why", pol: fsm.CompactionPolicy{Retention: -1, MaxBytes: 1000}, live: []string{"m"},
			facts: fsm.JournalFacts{Snapshots: []uint64{200}, Newest: 200, InUse: 5000}, wantUpTo: 200, overBudget: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := fsm.New()
			for arn, ts := range tc.tombs {
				st.Tombstones[arn] = ts
			}
			for m, seq := range tc.messages {
				st.Messages[m] = seq
			}
			if len(tc.live) > 0 {
				st.Tasks["live"] = &fsm.Task{ARN: "live", Messages: tc.live}
			}
			p := st.PlanCompaction(now, tc.pol, tc.facts)
			if p.UpTo != tc.wantUpTo || !slices.Equal(p.Tasks, tc.wantTasks) || !slices.Equal(p.Messages, tc.wantMsgs) || !slices.Equal(p.Early, tc.wantEarly) || (p.OverBudget != "") != tc.overBudget {
				t.Fatalf("plan = up to %d, tasks %v, messages %v, early %v, over budget %q; want up to %d, tasks %v, messages %v, early %v, over budget %v",
					p.UpTo, p.Tasks, p.Messages, p.Early, p.OverBudget, tc.wantUpTo, tc.wantTasks, tc.wantMsgs, tc.wantEarly, tc.overBudget)
			}
			if tc.overBudget && !strings.Contains(p.OverBudget, "--journal-max-bytes") {
				t.Fatalf("over budget %q does not name the flag", p.OverBudget)
			}
		})
	}
}

// The predicate keeps a kept task's history whole and every agent_started.
func TestCompactionDrops(t *testing.T) {
	now := time.Date(2026, 1, 10, 0, 0, 0, 0, time.UTC)
	st := fsm.New()
	st.Tombstones["gone"] = fsm.TombstoneOf(now.Add(-30*24*time.Hour).UnixNano(), 50, 49)
	p := st.PlanCompaction(now, fsm.CompactionPolicy{Retention: time.Hour}, fsm.JournalFacts{Snapshots: []uint64{100}, Newest: 100, HorizonSeq: 60})
	for _, tc := range []struct {
		task string
		typ  event.Type
		seq  uint64
		want bool
	}{
		{"gone", event.TypeTaskTransitioned, 80, true},  // with its task, whatever its age
		{"kept", event.TypeTaskTransitioned, 10, false}, // a kept task's history stays whole
		{"", event.TypeAgentStarted, 10, false},         // a replay from the start needs it
		{"", event.TypePayloadReceived, 60, true},       // old enough
		{"", event.TypePayloadReceived, 61, false},      // after the cut
	} {
		if got := p.Drops(tc.task, tc.typ, tc.seq); got != tc.want {
			t.Errorf("Drops(%q, %s, %d) = %v; want %v", tc.task, tc.typ, tc.seq, got, tc.want)
		}
	}
}

// A snapshot's refusals are checked as strictly as its tombstones: out of order, past the
// snapshot's own record, or more than MaxRefusals is damage, named, and the snapshot refused;
// a snapshot from before refusals existed (none listed) restores.
func TestRestoreChecksRefusals(t *testing.T) {
	st := fsm.New()
	for seq := uint64(1); seq <= 3; seq++ {
		if err := st.Apply(event.Record{Seq: seq, Time: t0, Task: "task/lost", Event: &event.RecordRefused{MessageID: "m-1", Record: "task_added", Reason: "task without containers"}}); err != nil {
			t.Fatal(err)
		}
	}
	good, err := st.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fsm.Restore(good); err != nil {
		t.Fatalf("restore: %v", err)
	}
	old := strings.Replace(string(good), `"refusals":[`, `"ignored":[`, 1)
	old = old[:strings.Index(old, `,"ignored"`)] + "}}" // no refusals at all, as before they existed
	if back, err := fsm.Restore([]byte(old)); err != nil || len(back.Refusals) != 0 {
		t.Fatalf("a snapshot without refusals: %v, %d refusals", err, len(back.Refusals))
	}
	for name, bad := range map[string]string{
		"out of order":   strings.Replace(string(good), `"seq":3`, `"seq":1`, 1),
		"past the state": strings.Replace(string(good), `"seq":3`, `"seq":9`, 1),
		"too many":       strings.Replace(string(good), `"refusals":[`, `"refusals":[`+strings.Repeat(`{"seq":0,"at_ns":0,"record":"x","reason":"y"},`, fsm.MaxRefusals), 1),
	} {
		if _, err := fsm.Restore([]byte(bad)); err == nil || !strings.Contains(err.Error(), "refusal") {
			t.Errorf("%s: restore = %v, want an error naming the refusals", name, err)
		}
	}
}

// A compaction's records are each small enough that the journal stores two in a 4 KiB page:
// bbolt stores a value in one run of contiguous pages, and a round that forgot 7,000 tasks
// in one 236 KB record needed 58 of them every round, which the pages compaction frees did not
// hold, so the file grew while megabytes stood free (issue 25's disk row). Journaled in one
// commit and applied in order, the pieces forget exactly what the whole compaction forgets.
func TestCompactionRecordsAreSmallAndForgetWhatTheRoundForgets(t *testing.T) {
	now := time.Date(2026, 1, 10, 0, 0, 0, 0, time.UTC)
	st, whole := fsm.New(), fsm.New() // whole: a journal an older build wrote, one record a round
	done := &event.CompactionDone{UpToSeq: 900000, Records: 98000}
	for i := range 8000 {
		arn := fmt.Sprintf("arn:aws:ecs:us-east-1:123456789012:task/prod/%032x", i)
		st.Tombstones[arn] = fsm.TombstoneOf(now.Add(-time.Hour).UnixNano(), uint64(10+i), uint64(9+i))
		switch {
		case i < 7000:
			done.Tasks = append(done.Tasks, arn)
		case i < 7500:
			done.Early = append(done.Early, arn)
		}
	}
	done.Tasks = append(done.Tasks, "arn:"+strings.Repeat("x", 2500)) // one name longer than a piece: alone
	st.Tombstones[done.Tasks[len(done.Tasks)-1]] = fsm.TombstoneOf(now.UnixNano(), 5, 0)
	for i := range 600 {
		m := fmt.Sprintf("m-%d-\u00e9<&>", i) // escaped in JSON: counted as stored
		st.Messages[m] = uint64(i + 1)
		if i < 550 {
			done.Messages = append(done.Messages, m)
		}
	}
	st.LastSeq = 900100
	for arn, ts := range st.Tombstones {
		c := *ts
		whole.Tombstones[arn] = &c
	}
	maps.Copy(whole.Messages, st.Messages)
	whole.LastSeq = st.LastSeq

	recs := st.Step(now, fsm.CompactionFinished{Done: done}).Records
	var tasks, msgs, early []string
	records := 0
	for i, r := range recs {
		d, ok := r.Event.(*event.CompactionDone)
		if !ok {
			t.Fatalf("record %d is %T; want compaction_done", i, r.Event)
		}
		body, err := event.MarshalBody(d)
		if err != nil {
			t.Fatal(err)
		}
		// 40 bytes: the journal's envelope beside the body (seq, time, type, checksum).
		if stored := 40 + len(body); stored > 2000 && len(d.Tasks)+len(d.Messages)+len(d.Early) > 1 {
			t.Errorf("record %d of %d stores %d bytes (%d tasks, %d messages, %d early); want ≤ 2000",
				i+1, len(recs), stored, len(d.Tasks), len(d.Messages), len(d.Early))
		}
		if d.UpToSeq != done.UpToSeq {
			t.Errorf("record %d: up_to %d; want the round's %d", i+1, d.UpToSeq, done.UpToSeq)
		}
		tasks, msgs, early = append(tasks, d.Tasks...), append(msgs, d.Messages...), append(early, d.Early...)
		records += d.Records
	}
	if len(recs) < 2 {
		t.Fatalf("one record for %d tasks, %d messages, %d early", len(done.Tasks), len(done.Messages), len(done.Early))
	}
	if !slices.Equal(tasks, done.Tasks) || !slices.Equal(msgs, done.Messages) || !slices.Equal(early, done.Early) || records != done.Records {
		t.Fatalf("the pieces list %d tasks, %d messages, %d early, %d records; the round %d, %d, %d, %d",
			len(tasks), len(msgs), len(early), records, len(done.Tasks), len(done.Messages), len(done.Early), done.Records)
	}
	for i, r := range recs {
		r.Seq, r.Time = st.LastSeq+1, now
		if err := st.Apply(r); err != nil {
			t.Fatalf("record %d of %d: %v", i+1, len(recs), err)
		}
	}
	if len(st.Tombstones) != 8000-7000 || len(st.Messages) != 50 {
		t.Fatalf("after the pieces: %d tombstones, %d message ids; want 1000, 50", len(st.Tombstones), len(st.Messages))
	}
	for _, arn := range done.Early {
		if ts := st.Tombstones[arn]; ts == nil || !ts.HistoryDropped() {
			t.Fatalf("early drop %s: tombstone %+v; want kept, its history marked dropped", arn, ts)
		}
	}
	if err := whole.Apply(event.Record{Seq: whole.LastSeq + 1, Time: now, Event: done}); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(whole.Tombstones, st.Tombstones) || !maps.Equal(whole.Messages, st.Messages) {
		t.Fatalf("the pieces leave %d tombstones, %d message ids; the one record an older build wrote %d, %d",
			len(st.Tombstones), len(st.Messages), len(whole.Tombstones), len(whole.Messages))
	}
}
