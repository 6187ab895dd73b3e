package explore

import (
	"slices"
	"strings"
	"time"
)

// A violation found depth first comes with the path the search happened to take, most of
// whose moves the violation does not need; shorten makes it as short as it can before it is
// reported, so the engine script a violation prints is one a reader can follow.

// The bounded breadth-first search shorten ends with.
const (
	shortenStates = 200_000
	shortenTime   = 30 * time.Second
)

// shorten returns the shortest trace it finds that breaks what trace breaks (the violation's
// class, classOf): first by dropping moves one at a time while the violation remains, to a
// trace none of whose moves can go; then by a breadth-first search from the root, within
// shortenStates and shortenTime, for one shorter still. It never returns a longer trace.
func shorten(b Bounds, trace []move, why string) []move {
	class := classOf(b, why)
	best, ok := breaks(b, trace, class)
	if !ok { // a trace that does not replay is reported as it was found
		return trace
	}
	for dropped := true; dropped; {
		dropped = false
		for i := len(best) - 1; i >= 0; i-- {
			if i >= len(best) {
				continue
			}
			if t, ok := breaks(b, append(slices.Clone(best[:i]), best[i+1:]...), class); ok {
				best, dropped = t, true
			}
		}
	}
	if len(best) > 1 {
		nb := b
		nb.Depth, nb.Frontier, nb.Want, nb.MaxStates, nb.Timeout = len(best)-1, 0, class, shortenStates, shortenTime
		if class != notEventually {
			nb.LivenessEvery = 0
		}
		if r, _ := search(nb); r.Violation != "" && len(r.Trace) < len(best) {
			best = r.Trace
		}
	}
	return best
}

const notEventually = "NOT EVENTUALLY"

// classOf is what a violation is, whatever the states it names: Bounds.Want when set, else
// its words before the first colon ("REMOVED BEFORE SETTLED").
func classOf(b Bounds, why string) string {
	if b.Want != "" {
		return b.Want
	}
	class, _, _ := strings.Cut(why, ":")
	return class
}

// breaks replays trace from the root and returns its prefix that ends where a violation of
// class shows (false: none does, or a move is not enabled where the trace makes it). A
// violation of a fair run (NOT EVENTUALLY) is looked for at the trace's end.
func breaks(b Bounds, trace []move, class string) ([]move, bool) {
	if b.FairSteps <= 0 {
		b.FairSteps = 400
	}
	of := func(why string) bool { return why != "" && strings.HasPrefix(why, class) }
	s := initial(b)
	for k, m := range trace {
		ms := s.moves(b)
		if of(s.stuck(b, ms)) {
			return trace[:k], true
		}
		if !slices.Contains(ms, m) {
			return nil, false
		}
		r := s.play(m, b)
		if len(r.violations) > 0 && of(r.violations[0]) || of(b.broken(s)) {
			return trace[:k+1], true
		}
	}
	if of(s.stuck(b, s.moves(b))) {
		return trace, true
	}
	if class == notEventually {
		if why, _ := s.eventually(b, b.FairSteps); of(why) {
			return trace, true
		}
	}
	return nil, false
}

// finish is the trace as reported and the state it ends in: for a fair run's violation, with
// the fair run from where the trace ends when it was shortened (dropped moves may have cut
// into it).
func finish(b Bounds, trace []move, why string, shortened bool) ([]move, string) {
	s := initial(b)
	for _, m := range trace {
		s.play(m, b)
	}
	if shortened && strings.HasPrefix(why, notEventually) {
		_, then := s.eventually(b, max(b.FairSteps, 400))
		for _, m := range then {
			s.play(m, b)
		}
		trace = append(slices.Clone(trace), then...)
	}
	return trace, s.describe(b)
}
