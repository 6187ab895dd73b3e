package explore

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentd/agentd/internal/fsm"
)

// Bounds bound the search.
type Bounds struct {
	Tasks, Containers int
	Depth             int           // moves on a path at most
	Faults            int           // fault moves on a path at most (failures, lost answers, 429s, exits, …)
	Crashes           int           // crashes on a path at most
	MaxStates         int           // stop after this many distinct states (0: no bound)
	Timeout           time.Duration // stop after this long (0: no bound)
	Workers           int           // 0: GOMAXPROCS
	// Frontier: the search goes breadth first while the next level is expected to hold at
	// most this many states, then depth first, to Depth, from every state of the last level
	// (0: breadth first only). Breadth first alone runs out of MaxStates at a shallow level.
	Frontier int
	// LivenessEvery runs the bounded fair-run check from one new state in this many (0: never).
	LivenessEvery int
	FairSteps     int // a fair run's bound (0: 400)
	// Want, when set, is the violation sought (its prefix): a state that breaks another
	// property is not expanded, and the search goes on — to find the one a planted bug
	// shows when another finding would come first.
	Want string
	// property, when set, is one more safety property (a test's).
	property func(*state) string
}

// broken is the first safety property s breaks ("": none).
func (b Bounds) broken(s *state) string {
	if why := s.safety(b); why != "" || b.property == nil {
		return why
	}
	return b.property(s)
}

// Result is what a search found.
type Result struct {
	States, Transitions int
	Depth               int  // the deepest level a state was seen at
	Breadth             int  // every state within this many moves was seen (the breadth-first levels)
	Roots               int  // states the depth-first part started from
	Complete            bool // every state within the bounds was seen
	Elapsed             time.Duration
	Liveness            int // fair runs checked
	Pruned              int // states not expanded: they broke a property other than Bounds.Want
	Violation           string
	Trace               []move // the shortest path to the violation found (shorten.go)
	Found               int    // the path's length as the search found it
	End                 string // the state it ends in
	// Err: the search could not go on — a state rebuilt by replaying its path from the root
	// came out other than it was, so the core is not deterministic and no trace can be trusted.
	Err error
}

func (r Result) String() string {
	out := fmt.Sprintf("%d distinct states, %d transitions, depth %d (breadth first complete to %d moves, then depth first from %d states), %s (%.0f states/s), %d fair runs, complete=%v",
		r.States, r.Transitions, r.Depth, r.Breadth, r.Roots, r.Elapsed.Round(time.Millisecond), float64(r.States)/r.Elapsed.Seconds(), r.Liveness, r.Complete)
	if r.Violation != "" {
		out += fmt.Sprintf("\nviolation after %d steps (found after %d): %s", len(r.Trace), r.Found, r.Violation)
	}
	if r.Err != nil {
		out += "\nsearch failed: " + r.Err.Error()
	}
	return out
}

// initial is the agent started on an empty journal, the world empty.
func initial(b Bounds) *state {
	s := &state{n: node{n: fsm.NewNode(fsm.New(), nodeConfig)}, faults: int8(b.Faults), crashes: int8(b.Crashes)}
	s.w.nCtrs = b.Containers
	r := s.n.recoverFrom(s.now(), func(*fsm.State) fsm.RuntimeObserved { return fsm.RuntimeObserved{} })
	s.release(r)
	return s
}

// entry is a state of the breadth-first levels, compact: the state itself is rebuilt when
// needed by replaying the moves from the root (a state is ~19 KB; an entry 24 bytes).
type entry struct {
	parent int32
	m      move
	hash   uint64
}

// searcher is one search's shared state.
type searcher struct {
	b                             Bounds
	start                         time.Time
	seen                          *seenSet
	fair                          *seenSet // the keys a fair run started from
	entries                       []entry  // the breadth-first tree; entries[0] is the root
	deepest                       atomic.Int32
	transitions, fairRuns, pruned atomic.Int64
	truncated                     atomic.Bool // a depth-first search stopped at its share of MaxStates

	mu        sync.Mutex // guards what follows
	violation string
	trace     []move
	err       error
	done      atomic.Bool // a violation or an error: every worker stops
}

func (x *searcher) stopped() bool {
	b := x.b
	return x.done.Load() || b.MaxStates > 0 && x.seen.len() >= b.MaxStates || b.Timeout > 0 && time.Since(x.start) > b.Timeout
}

// report keeps the first violation (or error) and stops the search.
func (x *searcher) report(why string, trace []move, err error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.violation == "" && x.err == nil {
		x.violation, x.trace, x.err = why, trace, err
	}
	x.done.Store(true)
}

// wanted: a violation the search reports (any, unless Bounds.Want names one).
func (x *searcher) wanted(why string) bool { return x.b.Want == "" || strings.HasPrefix(why, x.b.Want) }

// check is what breaks at c, just reached by a move that made r ("": nothing), and the fair
// run that broke a property if that is what did.
func (x *searcher) check(c *state, r ready, h uint64) (string, []move) {
	if len(r.violations) > 0 {
		return r.violations[0], nil
	}
	if why := x.b.broken(c); why != "" {
		return why, nil
	}
	// one state in LivenessEvery, chosen by its key, once: the same states whatever the order
	if x.b.LivenessEvery > 0 && h%uint64(x.b.LivenessEvery) == 0 && x.fair.first(h) {
		x.fairRuns.Add(1)
		return c.eventually(x.b, x.b.FairSteps)
	}
	return "", nil
}

// rebuild replays entry id's moves from the root and checks the state it comes to is the one
// stored; from, when not nil, is its parent's state already rebuilt.
func (x *searcher) rebuild(id int32, from *state) (*state, error) {
	e := x.entries[id]
	var s *state
	if id == 0 {
		s = initial(x.b)
	} else if from != nil {
		s = from.clone()
		s.play(e.m, x.b)
	} else {
		s = initial(x.b)
		for _, m := range traceOf(x.entries, id) {
			s.play(m, x.b)
		}
	}
	if h := s.key(x.b); h != e.hash {
		return nil, fmt.Errorf("replaying %v from the root came to another state than playing it did (key %x, stored %x): the core or the world is not deterministic", traceOf(x.entries, id), h, e.hash)
	}
	return s, nil
}

// rebuildFrom rebuilds entry id from its parent, and the parent from its own, each ancestor
// rebuilt once and kept in ancestors.
func (x *searcher) rebuildFrom(id int32, ancestors map[int32]*state) (*state, error) {
	if id == 0 {
		return x.rebuild(0, nil)
	}
	p := x.entries[id].parent
	parent, ok := ancestors[p]
	if !ok {
		var err error
		if parent, err = x.rebuildFrom(p, ancestors); err != nil {
			return nil, err
		}
		ancestors[p] = parent
	}
	return x.rebuild(id, parent)
}

// Search explores the states reachable within the bounds: breadth first, so a violation near
// the root has its shortest trace, while the levels stay within Bounds.Frontier; then depth
// first, to Bounds.Depth, from each state of the last level, each given an equal share of
// what is left of MaxStates. A state is expanded again when found at a shallower depth than
// before (more of the depth bound is left below it). A violation found depth first is
// shortened before it is reported (shorten.go).
func Search(b Bounds) Result {
	res, _ := search(b)
	return res
}

func search(b Bounds) (Result, *seenSet) {
	if b.Workers <= 0 {
		b.Workers = runtime.GOMAXPROCS(0)
	}
	if b.FairSteps <= 0 {
		b.FairSteps = 400
	}
	x := &searcher{b: b, start: time.Now(), seen: newSeenSet(), fair: newSeenSet()}
	root := initial(b)
	h := root.key(b)
	x.seen.visit(h, 0)
	x.entries = []entry{{parent: -1, hash: h}}
	var res Result
	level := []int32{0}
	prev := 0
	for depth := 0; ; depth++ {
		res.Breadth = depth
		if len(level) == 0 || depth >= b.Depth || x.stopped() {
			if res.Complete = len(level) == 0 || depth >= b.Depth; res.Complete {
				res.Breadth = b.Depth
			}
			break
		}
		// the next level's size, guessed from how this one grew from the last
		if b.Frontier > 0 && prev > 0 && len(level)*len(level)/prev > b.Frontier {
			res.Roots = len(level)
			x.deep(level, depth)
			res.Complete = !x.truncated.Load() && !x.stopped()
			break
		}
		prev = len(level)
		next := x.expand(level, depth)
		if x.stopped() { // the level below is not whole
			break
		}
		level = next
	}
	res.States, res.Transitions, res.Liveness = x.seen.len(), int(x.transitions.Load()), int(x.fairRuns.Load())
	res.Pruned, res.Depth = int(x.pruned.Load()), int(x.deepest.Load())
	res.Violation, res.Err = x.violation, x.err
	if res.Violation != "" || res.Err != nil {
		res.Complete = false
	}
	if res.Violation != "" {
		res.Found = len(x.trace)
		res.Trace = x.trace
		if res.Roots > 0 { // found depth first: far from its shortest, as a rule
			res.Trace = shorten(b, x.trace, res.Violation)
		}
		res.Trace, res.End = finish(b, res.Trace, res.Violation, res.Roots > 0)
	}
	res.Elapsed = time.Since(x.start)
	return res, x.seen
}

// child is a state one level down, found breadth first.
type child struct {
	parent int32
	m      move
	hash   uint64
	why    string
	then   []move // the fair run from it that broke a property
}

// expand makes the level below level (the entries at depth), in parallel and in chunks of
// neighbours, whose ancestors are rebuilt once a chunk; the chunks' children are merged in order, so which
// of two states with one key is kept does not depend on the workers' timing.
func (x *searcher) expand(level []int32, depth int) []int32 {
	const chunk = 256
	chunks := (len(level) + chunk - 1) / chunk
	outs := make([][]child, chunks)
	x.inParallel(chunks, func(k int) {
		ancestors := map[int32]*state{} // the chunk's, rebuilt once each
		for _, id := range level[k*chunk : min(len(level), (k+1)*chunk)] {
			s, err := x.rebuildFrom(id, ancestors)
			if err != nil {
				x.report("", nil, err)
				return
			}
			outs[k] = append(outs[k], x.children(s, id, depth)...)
		}
	})
	var out []int32
	for _, cs := range outs {
		for _, c := range cs {
			if c.m.k == stuckMark {
				if x.wanted(c.why) {
					x.report(c.why, traceOf(x.entries, c.parent), nil)
				}
				continue
			}
			if isNew, _ := x.seen.visit(c.hash, depth+1); !isNew {
				continue
			}
			x.deepest.Store(int32(depth + 1))
			x.entries = append(x.entries, entry{parent: c.parent, m: c.m, hash: c.hash})
			id := int32(len(x.entries) - 1)
			if c.why != "" {
				if !x.wanted(c.why) {
					x.pruned.Add(1)
					continue
				}
				x.report(c.why, append(traceOf(x.entries, id), c.then...), nil)
			}
			out = append(out, id)
		}
	}
	return out
}

// stuckMark marks a child that says its parent is stuck, not a new state.
const stuckMark kind = 255

// children are s's successors not seen at an earlier level, each with what it breaks.
func (x *searcher) children(s *state, id int32, depth int) []child {
	ms := s.moves(x.b)
	if why := s.stuck(x.b, ms); why != "" {
		return []child{{parent: id, m: move{k: stuckMark}, why: why}}
	}
	var out []child
	for _, m := range ms {
		x.transitions.Add(1)
		c := s.clone()
		r := c.play(m, x.b)
		h := c.key(x.b)
		if d, ok := x.seen.depth(h); ok && d <= depth+1 {
			continue
		}
		why, then := x.check(c, r, h)
		out = append(out, child{parent: id, m: m, hash: h, why: why, then: then})
	}
	return out
}

// frame is one state on a depth-first path.
type frame struct {
	s       *state
	moves   []move
	next    int
	entered bool // its moves are listed
}

// deep searches depth first from each of roots (entries at depth), in parallel: each root in
// turn gets an equal share of the states MaxStates leaves, and its moves in an order of its
// own (shuffled, seeded by the root), so the searches from the many roots go down different
// paths rather than each down its first moves.
func (x *searcher) deep(roots []int32, depth int) {
	x.inParallel(len(roots), func(k int) {
		s, err := x.rebuild(roots[k], nil)
		if err != nil {
			x.report("", nil, err)
			return
		}
		share := 0
		if x.b.MaxStates > 0 {
			share = max(1, (x.b.MaxStates-x.seen.len())/(len(roots)-k))
		}
		x.dive(roots[k], s, depth, share, rand.New(rand.NewPCG(uint64(k), 42)))
	})
}

// inParallel calls do for each k in [0, n) once, on the search's workers, taking the next k
// as a worker comes free, until the search stops.
func (x *searcher) inParallel(n int, do func(k int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range x.b.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := int(next.Add(1) - 1); k < n && !x.stopped(); k = int(next.Add(1) - 1) {
				do(k)
			}
		}()
	}
	wg.Wait()
}

// dive is the depth-first search from one root, until it has found share new states (0: no
// bound).
func (x *searcher) dive(rootID int32, root *state, depth, share int, rng *rand.Rand) {
	stack := []frame{{s: root}}
	var path []move // the moves from the root to the top of the stack
	found := 0
	pathTo := func(more ...move) []move {
		out := append(traceOf(x.entries, rootID), path...)
		return append(out, more...)
	}
	for len(stack) > 0 {
		if x.stopped() {
			x.truncated.Store(true)
			return
		}
		f := &stack[len(stack)-1]
		d := depth + len(stack) - 1
		if !f.entered {
			f.entered = true
			f.moves = f.s.moves(x.b)
			if why := f.s.stuck(x.b, f.moves); why != "" && x.wanted(why) {
				x.report(why, pathTo(), nil)
				return
			}
			if d >= x.b.Depth {
				f.moves = f.moves[:0]
			}
			rng.Shuffle(len(f.moves), func(i, j int) { f.moves[i], f.moves[j] = f.moves[j], f.moves[i] })
		}
		if f.next >= len(f.moves) {
			stack = stack[:len(stack)-1]
			if len(path) > 0 {
				path = path[:len(path)-1]
			}
			continue
		}
		m := f.moves[f.next]
		f.next++
		x.transitions.Add(1)
		c := f.s.clone()
		r := c.play(m, x.b)
		h := c.key(x.b)
		isNew, expand := x.seen.visit(h, d+1)
		if !expand {
			continue
		}
		for old := x.deepest.Load(); int32(d+1) > old && !x.deepest.CompareAndSwap(old, int32(d+1)); old = x.deepest.Load() {
		}
		if isNew {
			found++
		}
		if why, then := x.check(c, r, h); why != "" {
			if !x.wanted(why) {
				x.pruned.Add(1)
				continue
			}
			x.report(why, append(pathTo(m), then...), nil)
			return
		}
		if share > 0 && found >= share {
			x.truncated.Store(true)
			return
		}
		stack = append(stack, frame{s: c})
		path = append(path, m)
	}
}

func traceOf(entries []entry, id int32) []move {
	var out []move
	for ; id > 0; id = entries[id].parent {
		out = append(out, entries[id].m)
	}
	for l, r := 0, len(out)-1; l < r; l, r = l+1, r-1 {
		out[l], out[r] = out[r], out[l]
	}
	return out
}

// seenSet is the keys of the states seen, each with the least depth it was seen at, in
// shards so the workers rarely wait.
type seenSet struct {
	shards [64]struct {
		sync.Mutex
		m map[uint64]uint8
	}
	n atomic.Int64
}

func newSeenSet() *seenSet {
	s := &seenSet{}
	for i := range s.shards {
		s.shards[i].m = map[uint64]uint8{}
	}
	return s
}

// visit records key h seen at depth d: whether it is new, and whether it is to be expanded
// (new, or seen before only deeper).
func (s *seenSet) visit(h uint64, d int) (isNew, expand bool) {
	sh := &s.shards[h%64]
	sh.Lock()
	defer sh.Unlock()
	old, ok := sh.m[h]
	if ok && int(old) <= d {
		return false, false
	}
	sh.m[h] = uint8(min(d, 255))
	if !ok {
		s.n.Add(1)
	}
	return !ok, true
}

// first reports whether h is new, and records it.
func (s *seenSet) first(h uint64) bool {
	isNew, _ := s.visit(h, 0)
	return isNew
}

// depth is the least depth h was seen at.
func (s *seenSet) depth(h uint64) (int, bool) {
	sh := &s.shards[h%64]
	sh.Lock()
	defer sh.Unlock()
	d, ok := sh.m[h]
	return int(d), ok
}

func (s *seenSet) len() int { return int(s.n.Load()) }

// keys are every key seen.
func (s *seenSet) keys() map[uint64]bool {
	out := map[uint64]bool{}
	for i := range s.shards {
		for h := range s.shards[i].m {
			out[h] = true
		}
	}
	return out
}
