package explore

import (
	"fmt"
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
	// LivenessEvery runs the bounded fair-run check from one new state in this many (0: never).
	LivenessEvery int
	FairSteps     int // a fair run's bound (0: 400)
	// Want, when set, is the violation sought (its prefix): a state that breaks another
	// property is not expanded, and the search goes on — to find the one a planted bug
	// shows when another finding would come first.
	Want string
}

// Result is what a search found.
type Result struct {
	States, Transitions int
	Depth               int  // the deepest level expanded
	Complete            bool // every state within the bounds was seen
	Elapsed             time.Duration
	Liveness            int // fair runs checked
	Pruned              int // states not expanded: they broke a property other than Bounds.Want
	Violation           string
	Trace               []move // the shortest path to the violation
	End                 string // the state it ends in
}

func (r Result) String() string {
	out := fmt.Sprintf("%d distinct states, %d transitions, depth %d, %s (%.0f states/s), %d fair runs, complete=%v",
		r.States, r.Transitions, r.Depth, r.Elapsed.Round(time.Millisecond), float64(r.States)/r.Elapsed.Seconds(), r.Liveness, r.Complete)
	if r.Violation != "" {
		out += fmt.Sprintf("\nviolation after %d steps: %s", len(r.Trace), r.Violation)
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

// entry is a state seen, for tracing back: its parent and the move that made it.
type entry struct {
	parent int32
	m      move
}

// stuckMark marks a found state that is stuck, not a new one.
const stuckMark kind = 255

type found struct {
	s      *state
	parent int32
	m      move
	why    string
	then   []move // the fair run from s that broke a property
}

// Search explores every state reachable within the bounds, breadth first, so the first
// violation found has a shortest trace.
func Search(b Bounds) Result {
	if b.Workers <= 0 {
		b.Workers = runtime.GOMAXPROCS(0)
	}
	if b.FairSteps <= 0 {
		b.FairSteps = 400
	}
	start := time.Now()
	var res Result
	seen := newSeenSet()
	root := initial(b)
	seen.add(root.key(b))
	entries := []entry{{parent: -1}}
	frontier := []*state{root}
	ids := []int32{0}
	var transitions, fairRuns atomic.Int64
	stop := func() bool {
		return b.MaxStates > 0 && seen.len() >= b.MaxStates || b.Timeout > 0 && time.Since(start) > b.Timeout
	}
	for depth := 0; depth < b.Depth && len(frontier) > 0 && !stop(); depth++ {
		res.Depth = depth + 1
		outs := make([][]found, b.Workers)
		var wg sync.WaitGroup
		var next atomic.Int64
		for w := range b.Workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					k := int(next.Add(1) - 1)
					if k >= len(frontier) || stop() {
						return
					}
					s := frontier[k]
					frontier[k] = nil // expanded: its memory goes as the level goes on
					ms := s.moves(b)
					if why := s.stuck(b, ms); why != "" {
						outs[w] = append(outs[w], found{s: s, parent: ids[k], m: move{k: stuckMark}, why: why})
						continue
					}
					for _, m := range ms {
						transitions.Add(1)
						c := s.clone()
						r := c.play(m, b)
						if !seen.add(c.key(b)) {
							continue
						}
						why, fairPath := "", []move(nil)
						if len(r.violations) > 0 {
							why = r.violations[0]
						} else {
							why = c.safety(b)
						}
						if why == "" && b.LivenessEvery > 0 && seen.len()%b.LivenessEvery == 0 {
							fairRuns.Add(1)
							why, fairPath = c.eventually(b, b.FairSteps)
						}
						outs[w] = append(outs[w], found{s: c, parent: ids[k], m: m, why: why, then: fairPath})
					}
				}
			}()
		}
		wg.Wait()
		frontier, ids = frontier[:0:0], ids[:0:0]
		for _, out := range outs {
			for _, f := range out {
				if f.m.k == stuckMark {
					if res.Violation == "" && (b.Want == "" || strings.HasPrefix(f.why, b.Want)) {
						res.Violation, res.Trace, res.End = f.why, traceOf(entries, f.parent), f.s.describe(b)
					}
					continue
				}
				entries = append(entries, entry{parent: f.parent, m: f.m})
				id := int32(len(entries) - 1)
				if f.why != "" && b.Want != "" && !strings.HasPrefix(f.why, b.Want) {
					res.Pruned++
					continue
				}
				if f.why != "" && res.Violation == "" {
					res.Violation, res.Trace, res.End = f.why, append(traceOf(entries, id), f.then...), f.s.describe(b)
				}
				frontier, ids = append(frontier, f.s), append(ids, id)
			}
		}
		if res.Violation != "" {
			break
		}
	}
	res.States, res.Transitions, res.Liveness = seen.len(), int(transitions.Load()), int(fairRuns.Load())
	res.Complete = len(frontier) == 0 && res.Violation == ""
	res.Elapsed = time.Since(start)
	return res
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

// seenSet is the hashes of the states seen, in shards so the workers rarely wait.
type seenSet struct {
	shards [64]struct {
		sync.Mutex
		m map[uint64]struct{}
	}
	n atomic.Int64
}

func newSeenSet() *seenSet {
	s := &seenSet{}
	for i := range s.shards {
		s.shards[i].m = map[uint64]struct{}{}
	}
	return s
}

// add reports whether h is new.
func (s *seenSet) add(h uint64) bool {
	sh := &s.shards[h%64]
	sh.Lock()
	defer sh.Unlock()
	if _, ok := sh.m[h]; ok {
		return false
	}
	sh.m[h] = struct{}{}
	s.n.Add(1)
	return true
}

func (s *seenSet) len() int { return int(s.n.Load()) }
