package explore

import (
	"testing"
)

// The key merges only states with one future: breadth first, every state reached again
// under a key already seen has the successors (as keys) of the first state seen under it.
// A key that leaves out something the agent's next steps depend on (when a STOPPED task's
// cleanup falls due, a container's stop reason) fails it: the search would explore one of
// the two and never the other's future.
func TestTheKeyMergesOnlyStatesWithOneFuture(t *testing.T) {
	b := Bounds{Tasks: 1, Containers: 2, Depth: 7, Faults: 2, Crashes: 1}
	successors := func(s *state) map[uint64]bool {
		out := map[uint64]bool{}
		for _, m := range s.moves(b) {
			c := s.clone()
			c.play(m, b)
			out[c.key(b)] = true
		}
		return out
	}
	type seen struct {
		s     *state
		trace []move
	}
	root := initial(b)
	first := map[uint64]seen{root.key(b): {root, nil}}
	level := []seen{{root, nil}}
	for range b.Depth {
		var next []seen
		for _, p := range level {
			for _, m := range p.s.moves(b) {
				c := p.s.clone()
				c.play(m, b)
				trace := append(append([]move(nil), p.trace...), m)
				h := c.key(b)
				f, ok := first[h]
				if !ok {
					first[h] = seen{c, trace}
					next = append(next, seen{c, trace})
					continue
				}
				a, z := successors(f.s), successors(c)
				same := len(a) == len(z)
				for k := range a {
					same = same && z[k]
				}
				if !same {
					t.Fatalf("one key, two futures:\n%v\n%s\n%v\n%s", f.trace, f.s.describe(b), trace, c.describe(b))
				}
			}
		}
		level = next
	}
	t.Logf("%d states", len(first))
}
