package explore

import (
	"strings"
	"testing"
	"time"
)

// Breadth first alone runs out of states at a shallow level (at 3 tasks x 2 containers,
// about level 11 at a million states): the search goes depth first from its frontier, and a
// bounded search reaches its depth bound.
func TestTheSearchReachesItsDepthBound(t *testing.T) {
	b := Bounds{Tasks: 3, Containers: 2, Depth: 40, Faults: 2, Crashes: 1, MaxStates: 20_000, Frontier: 200, Timeout: time.Minute}
	r := Search(b)
	t.Log(r)
	if r.Err != nil || r.Violation != "" {
		t.Fatalf("%v %s\n%s", r.Err, r.Violation, Script(b, r.Trace, r.Violation))
	}
	if r.Depth != b.Depth || r.Roots == 0 {
		t.Fatalf("within %d states the search reached depth %d, not its bound %d: %s", b.MaxStates, r.Depth, b.Depth, r)
	}
	if r.States < b.MaxStates {
		t.Fatalf("the search stopped at %d states, short of its bound %d: %s", r.States, b.MaxStates, r)
	}
}

// Where both are complete, the search that goes depth first below its frontier sees the
// states the breadth-first search sees, no fewer and no more. No fewer: a state reached again
// at a shallower depth is expanded again, so the depth bound cuts no path short (the bound
// here is short of the deepest state, so it would). No more: the key merges only states with
// one future, so which of them a search happens to reach first cannot change what lies
// beyond (a key that left out when a STOPPED task's cleanup falls due merged a state whose
// cleanup was due with one whose was not: depth first then saw states breadth first did not;
// at 2 tasks x 2 containers a key without a container's stop reason, on which whether a stop
// makes its change again depends, merged 31 such pairs within 7 moves).
func TestDepthFirstSeesWhatBreadthFirstSees(t *testing.T) {
	b := Bounds{Tasks: 1, Containers: 1, Depth: 12, Faults: 1, Crashes: 1, Timeout: time.Minute}
	breadth, bfs := search(b)
	b.Frontier = 5
	depth, dfs := search(b)
	t.Logf("breadth first: %s\nthen depth first: %s", breadth, depth)
	if !breadth.Complete || !depth.Complete || depth.Roots == 0 {
		t.Fatalf("the searches are not both complete, or the second never went depth first")
	}
	inBFS, inDFS := bfs.keys(), dfs.keys()
	missed, more := 0, 0
	for h := range inBFS {
		if !inDFS[h] {
			missed++
		}
	}
	for h := range inDFS {
		if !inBFS[h] {
			more++
		}
	}
	if missed > 0 || more > 0 {
		t.Fatalf("of the %d states breadth first saw, depth first missed %d, and it saw %d more", len(inBFS), missed, more)
	}
}

// A violation found depth first, at the end of a long path, is reported at its shortest:
// the trace the breadth-first search finds for it. The violation here is a test's own
// property, every task ran and was cleaned: its shortest path is a whole life of two tasks.
func TestADeepViolationIsFoundAndReportedAtItsShortest(t *testing.T) {
	b := Bounds{Tasks: 2, Containers: 1, Depth: 40, Timeout: time.Minute,
		property: func(s *state) string {
			for i := range 2 {
				if _, gone := s.n.n.State().Tombstones[arn(i)]; !gone || s.w.tasks[i].ctrs[0].starts == 0 {
					return ""
				}
			}
			return "BOTH CLEANED: every task ran and was cleaned"
		}}
	breadth := Search(b)
	b.Frontier = 50
	depth := Search(b)
	t.Logf("breadth first: %s\nthen depth first: %s", breadth, depth)
	if !strings.HasPrefix(breadth.Violation, "BOTH CLEANED") || !strings.HasPrefix(depth.Violation, "BOTH CLEANED") {
		t.Fatal("a search did not find the violation")
	}
	if depth.Roots == 0 || depth.Found <= len(breadth.Trace) {
		t.Fatalf("the second search did not find it depth first, on a path longer than the shortest (%d steps): %s", len(breadth.Trace), depth)
	}
	if len(depth.Trace) != len(breadth.Trace) {
		t.Fatalf("found after %d steps, reported after %d: the shortest is %d\n%v", depth.Found, len(depth.Trace), len(breadth.Trace), depth.Trace)
	}
	if got, ok := breaks(b, depth.Trace, "BOTH CLEANED"); !ok || len(got) != len(depth.Trace) {
		t.Fatalf("the reported trace does not replay to the violation: %v", depth.Trace)
	}
}

// A state rebuilt from its path that comes out other than it was stored is the search's
// error, naming the path, never a trace: a core that is not deterministic cannot be explored.
func TestAStateThatReplaysDifferentlyIsAnError(t *testing.T) {
	b := Bounds{Tasks: 1, Containers: 1, Depth: 40}
	x := &searcher{b: b}
	root := initial(b)
	m := root.moves(b)[0]
	x.entries = []entry{{parent: -1, hash: root.key(b)}, {parent: 0, m: m, hash: 12345}}
	if _, err := x.rebuild(1, nil); err == nil || !strings.Contains(err.Error(), "not deterministic") || !strings.Contains(err.Error(), m.String()) {
		t.Fatalf("a stored key the replay does not come to: %v", err)
	}
	c := root.clone()
	c.play(m, b)
	x.entries[1].hash = c.key(b)
	if _, err := x.rebuild(1, nil); err != nil {
		t.Fatal(err)
	}
}
