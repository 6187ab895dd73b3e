package submit

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Place is what the agent has learnt of its place in the fleet: its slot, where the throttle
// last served it, how deep the fleet's bursts run, and how lately its reports met a 429. The engine keeps it across a restart,
// so a fleet restarted together (an upgrade, a reboot wave) reports its next storm in the
// order the throttle served it, not all at once into a wave of 429s while every agent learns
// its place again.
type Place struct {
	Slot, Served time.Duration
	// Depth is how long the fleet's bursts keep the throttle busy, as the agent saw it: where a
	// retry finds room (retry.go). Optional in the journal: a place kept before it has none.
	Depth time.Duration
	// Since429 is how many bursts ago a report last met a 429 while that still counts
	// (underThrottle: 0 to gatherBursts), -1 when it does not: the restarted agent gathers its
	// bursts' changes into one report for the rest of that window, no longer.
	Since429 int
	// Kept is when the place was kept (the engine's clock at the clean stop).
	Kept time.Time
}

// placeFresh is how long a kept place stays good. An upgrade or a reboot wave restarts an agent
// within minutes; one down longer comes back to a fleet that may have changed (its size, its
// control plane), where the old place would only hold its reports back, up to the longest
// backoff, until the shrink wore it down.
const placeFresh = time.Hour

// maxPlace bounds a kept place's text: String's is under 100 bytes.
const maxPlace = 256

// String is the place as the journal's meta keeps it:
// "slot=4.2s served=4.1s depth=9s since429=0 kept=2026-12-02T21:00:00Z".
func (p Place) String() string {
	return fmt.Sprintf("slot=%v served=%v depth=%v since429=%d kept=%s", p.Slot, p.Served, p.Depth, p.Since429, p.Kept.UTC().Format(time.RFC3339Nano))
}

// ParsePlace reads a place String wrote; a field missing, unknown, repeated or malformed, or a
// negative duration, is an error naming it.
func ParsePlace(v string) (Place, error) {
	if len(v) > maxPlace {
		// A damaged journal's value is not parsed, nor v into a log line, whole.
		return Place{}, fmt.Errorf("place of %d bytes: a kept place is under %d", len(v), maxPlace)
	}
	var p Place
	want := "want slot=, served=, since429= and kept=, and depth= if any, once each"
	seen := map[string]bool{}
	for _, f := range strings.Fields(v) {
		k, val, _ := strings.Cut(f, "=")
		if seen[k] {
			return Place{}, fmt.Errorf("place %q: field %q repeated; %s", v, k, want)
		}
		seen[k] = true
		var err error
		switch k {
		case "slot", "served", "depth":
			d := map[string]*time.Duration{"slot": &p.Slot, "served": &p.Served, "depth": &p.Depth}[k]
			if *d, err = time.ParseDuration(val); err != nil || *d < 0 {
				return Place{}, fmt.Errorf("place %q: %s=%q: want a duration of at least 0", v, k, val)
			}
		case "since429":
			if p.Since429, err = strconv.Atoi(val); err != nil || p.Since429 < -1 || p.Since429 > gatherBursts {
				return Place{}, fmt.Errorf("place %q: since429=%q: want -1 to %d", v, val, gatherBursts)
			}
		case "kept":
			if p.Kept, err = time.Parse(time.RFC3339Nano, val); err != nil {
				return Place{}, fmt.Errorf("place %q: kept=%q: want an RFC 3339 time", v, val)
			}
		default:
			return Place{}, fmt.Errorf("place %q: field %q unknown; %s", v, k, want)
		}
	}
	if len(seen) != 4 && (len(seen) != 5 || !seen["depth"]) {
		return Place{}, fmt.Errorf("place %q: %s", v, want)
	}
	return p, nil
}

// place is what the agent has learnt of its place in the fleet, kept now (Stop).
func (s *Submitter) place(now time.Time) Place {
	p := Place{Slot: s.slot.at, Served: s.slot.served, Depth: s.slot.depth, Since429: -1, Kept: now}
	if s.gather.met429 == 0 {
		// A new agent's first place, no 429 to prove it (slot.go): restarted, it is new again
		// and learns it again, not held by it for good (a restored place is no new agent's).
		return Place{Since429: -1, Kept: now}
	}
	if s.gather.met429 > 0 && s.underThrottle() { // a new agent's window is not kept: restarted, it is new again
		p.Since429 = s.burst.count - s.gather.met429
	}
	return p
}

// Learnt says whether the place says anything (a new agent's says nothing).
func (p Place) Learnt() bool { return p.Slot > 0 || p.Served > 0 || p.Depth > 0 || p.Since429 >= 0 }

// restore takes a place kept before a restart (Restart). One kept over placeFresh ago (or as
// long ahead: the clock was set back) is stale, and one past what the agent can learn — a slot
// past the longest backoff, a served time past it and its 5% spread — is refused: a damaged or
// hand-edited value would hold every burst's first report that long. A naive submitter learns
// nothing, so it keeps nothing.
func (s *Submitter) restore(p Place, now time.Time) error {
	if age := now.Sub(p.Kept); age > placeFresh || age < -placeFresh {
		return fmt.Errorf("place %s: kept %v before now, past %v: stale", p, age.Round(time.Second), placeFresh)
	}
	if p.Slot > s.p.Max || p.Served > s.p.Max+s.p.Max/20 || p.Depth > s.p.Max {
		return fmt.Errorf("place %s: past the longest backoff %v", p, s.p.Max)
	}
	if s.p.Naive {
		return nil
	}
	s.slot.at, s.slot.served, s.slot.depth = p.Slot, p.Served, p.Depth
	if p.Since429 >= 0 {
		s.gather.met429, s.burst.count = 1, 1+p.Since429
	} else {
		s.gather.met429 = -gatherBursts - 1 // a place learnt, no 429 lately: not new, not under the throttle
	}
	return nil
}
