package submit

import (
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/agentd/agentd/internal/protocol"
)

// A place reads back exactly as the journal's meta keeps it, and is restored only while it is
// fresh and within what an agent can learn (a slot and a depth up to the longest backoff, a
// served time up to that and its 5% spread): a stale or impossible place is refused and leaves
// nothing behind (a depth holds a late report back that long, burst.go).
func TestAPlaceReadsBackAsKept(t *testing.T) {
	const longest = 30 * time.Second
	kept := time.Date(2026, 12, 2, 21, 0, 0, 0, time.UTC)
	rapid.Check(t, func(t *rapid.T) {
		p := Place{
			Slot:     time.Duration(rapid.Int64Range(0, int64(time.Minute)).Draw(t, "slot")),
			Served:   time.Duration(rapid.Int64Range(0, int64(time.Minute)).Draw(t, "served")),
			Depth:    time.Duration(rapid.Int64Range(0, int64(time.Minute)).Draw(t, "depth")),
			Since429: rapid.IntRange(-1, gatherBursts).Draw(t, "since429"),
			Kept:     kept.Add(time.Duration(rapid.Int64Range(0, int64(time.Second)).Draw(t, "ns"))),
		}
		got, err := ParsePlace(p.String())
		if err != nil || got != p {
			t.Fatalf("ParsePlace(%q) = %v, %v; want %v", p.String(), got, err, p)
		}
		age := time.Duration(rapid.Int64Range(-int64(2*time.Hour), int64(2*time.Hour)).Draw(t, "age"))
		s := New(Policy{Max: longest})
		err = s.Step(p.Kept.Add(age), Restart{Place: p}).Refused
		refuse := p.Slot > longest || p.Served > longest+longest/20 || p.Depth > longest || age > time.Hour || age < -time.Hour
		if refuse != (err != nil) {
			t.Fatalf("Restore(%v) %v after it was kept, longest backoff %v: %v", p, age, longest, err)
		}
		want := Place{Since429: -1, Kept: p.Kept}
		if err == nil {
			want = p
		}
		if held := s.Step(p.Kept, Stop{}).Keep; held != want {
			t.Fatalf("Restore(%v) %v after: the submitter holds %v; want %v", p, age, held, want)
		}
	})
}

// What a submitter keeps is what it learnt: a slot taught at Max by a turn past it, then a
// burst served at once at that slot, leave a served time past Max (the slot's 5% spread) that a
// restart must restore, not refuse; and the window of gathering after the last 429 goes on
// where it was, not from its start again.
func TestAPlaceKeptAfterAStreakIsRestored(t *testing.T) {
	s := New(Policy{Max: 30 * time.Second, Seed: 1})
	start := time.Date(2026, 12, 2, 21, 0, 0, 0, time.UTC)
	throttledBurst(t, s, start, 0, 40*time.Second) // a turn past Max: the slot is Max
	// servedAtOnce plays a burst begun by payloads at at, its first report served at once.
	servedAtOnce := func(s *Submitter, at time.Time) time.Time {
		s.Step(at, Polled{Payloads: true, ReceivedAt: at})
		now := at
		p := offer(s, now, batch("c-2"))
		for p.Send == nil {
			now = p.At
			p = offer(s, now, batch("c-2"))
		}
		s.Step(now, Answer{Sent: p.Send, Result: protocol.ReportResult{Outcome: protocol.Settled, Accepted: []string{"c-2"}}})
		return now
	}
	now := servedAtOnce(s, start.Add(5*time.Minute))
	p := s.Step(now, Stop{}).Keep
	if p.Served <= 30*time.Second || p.Since429 != 1 {
		t.Fatalf("after a slot of Max served at once the place is %v; the test needs a served time past Max, one burst after the 429", p)
	}
	again := New(Policy{Max: 30 * time.Second, Seed: 2})
	if err := again.Step(now.Add(time.Minute), Restart{Place: p}).Refused; err != nil {
		t.Fatalf("the place the submitter kept (%v) is refused: %v", p, err)
	}
	if got := again.Step(now, Stop{}).Keep; got != p {
		t.Fatalf("restored %v; want %v", got, p)
	}
	for range gatherBursts - 1 {
		now = servedAtOnce(again, now.Add(5*time.Minute))
	}
	if !again.underThrottle() {
		t.Fatalf("%d bursts after the last 429 (1 before the restart) the agent no longer gathers", gatherBursts)
	}
	servedAtOnce(again, now.Add(5*time.Minute))
	if again.underThrottle() {
		t.Fatalf("%d bursts after the last 429 the agent still gathers: the restart restarted the window", gatherBursts+1)
	}
}

// A damaged journal's value of any length is refused without being parsed, and the error (a
// log line's) does not carry it.
func TestAHugeKeptPlaceIsRefusedUnread(t *testing.T) {
	v := "slot=1s served=1s since429=0 kept=2026-12-02T21:00:00Z " + strings.Repeat("x", 1<<20)
	_, err := ParsePlace(v)
	if err == nil || len(err.Error()) > 200 {
		t.Fatalf("ParsePlace of a %d-byte value: %.300v; want a short error", len(v), err)
	}
}
