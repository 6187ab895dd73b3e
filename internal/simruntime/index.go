package simruntime

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/agentd/agentd/internal/runtime"
)

// index lets the simulated runtime answer its per-call questions without a scan of every
// container: which container holds a name (Create), which have a health check (Verdicts), and
// which exits lie after a cursor (ExitsAfter). A scan per call made a storm of n tasks cost
// the simulation O(n²) — most of bench lifecycle's CPU, measuring the sim instead of the
// agent. The index is derived: built from the containers when first needed and rebuilt when
// its exit list has outgrown them, so the file format and the answers are unchanged
// (TestIndexAnswersAsAScanWould compares them with the scan).
type index struct {
	byName  map[string]string   // name → id
	checked map[string]struct{} // ids of containers with a health check
	// exits holds, sorted by time then id, every time at which a container's run may end or
	// has ended: a planned end, a stop, an OOM kill at start, an earlier run's exit. Entries a
	// later change made stale (a planned end overtaken by a stop, a removed container) stay
	// until the rebuild; ExitsAfter checks each against its container.
	exits []exitRef
}

type exitRef struct {
	at time.Time
	id string
}

func compareExitRef(a, b exitRef) int {
	return cmp.Or(a.at.Compare(b.at), strings.Compare(a.id, b.id))
}

// index is the index, built if it is missing or has outgrown the containers. s.mu is held.
func (s *Runtime) index() *index {
	if s.idx != nil && len(s.idx.exits) <= 4*len(s.state.Containers)+1024 {
		return s.idx
	}
	x := &index{byName: map[string]string{}, checked: map[string]struct{}{}}
	for _, c := range s.state.Containers {
		x.byName[c.Name] = c.ID
		if c.HealthCheck != nil {
			x.checked[c.ID] = struct{}{}
		}
		for _, p := range c.Past {
			x.exits = append(x.exits, exitRef{p.At, c.ID})
		}
		x.exits = append(x.exits, endsOf(c)...)
	}
	slices.SortFunc(x.exits, compareExitRef)
	x.exits = slices.CompactFunc(x.exits, func(a, b exitRef) bool { return compareExitRef(a, b) == 0 })
	s.idx = x
	return x
}

// endsOf are the times the current run of c may end at, as exitOf decides among them.
func endsOf(c *container) []exitRef {
	var out []exitRef
	for _, at := range []time.Time{c.StoppedAt, c.EndsAt} {
		if !at.IsZero() {
			out = append(out, exitRef{at, c.ID})
		}
	}
	if c.OOM && !c.StartedAt.IsZero() {
		out = append(out, exitRef{c.StartedAt, c.ID})
	}
	return out
}

// put notes a container created, started or stopped. s.mu is held.
func (x *index) put(c *container) {
	x.byName[c.Name] = c.ID
	if c.HealthCheck != nil {
		x.checked[c.ID] = struct{}{}
	}
	for _, r := range endsOf(c) {
		i, found := slices.BinarySearchFunc(x.exits, r, compareExitRef)
		if !found {
			x.exits = slices.Insert(x.exits, i, r)
		}
	}
}

// del notes a container removed. s.mu is held.
func (x *index) del(c *container) {
	if x.byName[c.Name] == c.ID {
		delete(x.byName, c.Name)
	}
	delete(x.checked, c.ID)
}

// exitsAt are the exits of c at time at, if c ended then: earlier runs', then the current one.
func exitsAt(c *container, at, now time.Time) []runtime.Exit {
	var out []runtime.Exit
	for _, p := range c.Past {
		if p.At.Equal(at) {
			out = append(out, runtime.Exit{ID: c.ID, Task: c.Task, Container: c.Container, ExitCode: p.Code, At: p.At, Cursor: p.At.UnixNano()})
		}
	}
	if end, code, ended := exitOf(c, now); ended && end.Equal(at) {
		out = append(out, runtime.Exit{ID: c.ID, Task: c.Task, Container: c.Container, ExitCode: code, OOMKilled: c.OOM, At: end, Cursor: end.UnixNano()})
	}
	return out
}
