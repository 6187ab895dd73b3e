package lazyfs

// Crash states, ALICE-style (Pillai et al., OSDI 2014), built from the log of a real run
// instead of from one power cut at a time. Invariant: every state built is one a disk that
// honours flushes could hold after a power cut at some point of the run — everything up to a
// barrier durable, plus some of what followed — and names that point: Cut, the last op that may
// have happened before the power went, so a checker knows what had been acknowledged.

import (
	"fmt"
	"slices"
)

// StateKind says how a crash state was built.
type StateKind string

const (
	KindSynced    StateKind = "synced"    // exactly what barrier k made durable
	KindPrefix    StateKind = "prefix"    // and a prefix of the ops after it
	KindReordered StateKind = "reordered" // and a prefix with one later op moved before others, or one op left out
	KindTorn      StateKind = "torn"      // and a prefix, then part of the next write, in 512-byte sectors
	KindMetadata  StateKind = "metadata"  // and directory entries not yet fsynced (with or without their files' data)
)

// Kinds lists the kinds in a fixed order (for reports).
var Kinds = []StateKind{KindSynced, KindPrefix, KindReordered, KindTorn, KindMetadata}

// StateOptions bound how many states each barrier yields.
type StateOptions struct {
	MaxFollow int // ops after a barrier considered (default 32)
	Window    int // how far an op may move, or be left behind (default 3)
	MaxTorn   int // torn variants a write yields (default 14: 7 sectors kept from the start, 7 from the end)
}

// sector is the unit a disk writes atomically.
const sector = 512

// CrashState is one state a power cut could leave.
type CrashState struct {
	Kind    StateKind
	Barrier int    // the barrier whose durability it starts from (the op index of that fsync)
	Cut     int    // index of the last op that may have happened before the cut
	What    string // how it was built, for a failure message
	Image   *Image // valid only during the visit
}

// CrashStates calls visit with every crash state of log, which ran on base. It stops at the
// first error visit returns.
func CrashStates(base *Image, log []*Op, o StateOptions, visit func(CrashState) error) error {
	if o.MaxFollow <= 0 {
		o.MaxFollow = 32
	}
	if o.Window <= 0 {
		o.Window = 3
	}
	if o.MaxTorn <= 0 {
		o.MaxTorn = 14
	}
	t := NewTracker(base.Clone(), false)
	following := func(i int) []*Op { // what came after op i-1, up to the next barrier
		var follow []*Op
		for _, f := range log[i:] {
			if len(follow) == o.MaxFollow || f.IsBarrier() {
				break
			}
			follow = append(follow, f)
		}
		return follow
	}
	// The start of the run counts as a barrier: what it began with is on disk.
	if err := statesAt(t, &Op{Index: -1, Kind: OpFsyncDir, Path: "(the start of the run)"}, following(0), o, visit); err != nil {
		return err
	}
	for i, op := range log {
		t.apply(op)
		if !op.IsBarrier() {
			continue
		}
		if err := statesAt(t, op, following(i+1), o, visit); err != nil {
			return err
		}
	}
	return nil
}

func statesAt(t *Tracker, barrier *Op, follow []*Op, o StateOptions, visit func(CrashState) error) error {
	durable := t.Durable()
	emit := func(kind StateKind, cut int, im *Image, what string, args ...any) error {
		return visit(CrashState{Kind: kind, Barrier: barrier.Index, Cut: cut, Image: im,
			What: fmt.Sprintf("%s state at barrier %s: ", kind, barrier) + fmt.Sprintf(what, args...)})
	}
	with := func(ops ...*Op) *Image {
		im := durable.Clone()
		for _, op := range ops {
			im.Apply(op)
		}
		return im
	}
	if err := emit(KindSynced, barrier.Index, durable.Clone(), "nothing after it"); err != nil {
		return err
	}
	running := durable.Clone()
	for i, op := range follow {
		running.Apply(op)
		if err := emit(KindPrefix, op.Index, running, "and the %d ops after it, up to %s", i+1, op); err != nil {
			return err
		}
	}
	for j := 1; j < len(follow); j++ {
		for i := max(0, j-o.Window); i < j; i++ {
			// follow[j] reached the disk before follow[i:j]
			ops := append(slices.Clone(follow[:i]), follow[j])
			if err := emit(KindReordered, follow[j].Index, with(ops...), "%s before %s", follow[j], follow[i]); err != nil {
				return err
			}
			// follow[i] left behind while follow[i+1:j+1] reached the disk
			ops = append(slices.Clone(follow[:i]), follow[i+1:j+1]...)
			if err := emit(KindReordered, follow[j].Index, with(ops...), "%s lost, the ops up to %s kept", follow[i], follow[j]); err != nil {
				return err
			}
		}
	}
	for i, op := range follow {
		if op.Kind != OpWrite {
			continue
		}
		for _, part := range tornParts(op, o.MaxTorn) {
			torn := *op
			torn.Off, torn.Data = part.off, part.data
			if err := emit(KindTorn, op.Index, with(append(slices.Clone(follow[:i]), &torn)...),
				"%s torn: only [%d, %d) written", op, part.off, part.off+int64(len(part.data))); err != nil {
				return err
			}
		}
	}
	// Directory entries made before the barrier, not yet fsynced: a file system may have
	// written them (journaling ones do, in order), with or without the files' data.
	entries, data := t.pendingOps()
	for i := range entries {
		if err := emit(KindMetadata, barrier.Index, with(entries[:i+1]...), "and the first %d unsynced directory entries, up to %s", i+1, entries[i]); err != nil {
			return err
		}
	}
	if len(entries) > 0 && len(data) > 0 {
		all := append(slices.Clone(data), entries...)
		slices.SortFunc(all, func(a, b *Op) int { return a.Index - b.Index })
		if err := emit(KindMetadata, barrier.Index, with(all...), "and every unsynced entry and write before it"); err != nil {
			return err
		}
	}
	return nil
}

type tornPart struct {
	off  int64
	data []byte
}

// tornParts are the ways op could be half on disk: the sectors it covers, some written and the
// rest not — a prefix of them, or a suffix (disks do not promise an order within a write).
func tornParts(op *Op, limit int) []tornPart {
	end := op.Off + int64(len(op.Data))
	var cuts []int64 // sector boundaries strictly inside the write
	for b := (op.Off/sector + 1) * sector; b < end; b += sector {
		cuts = append(cuts, b)
	}
	if len(cuts) == 0 {
		return nil
	}
	step := max(1, (2*len(cuts)+limit-1)/limit)
	var parts []tornPart
	for k := 0; k < len(cuts); k += step {
		c := cuts[k]
		parts = append(parts, tornPart{op.Off, op.Data[:c-op.Off]}, tornPart{c, op.Data[c-op.Off:]})
	}
	return parts
}

// pendingOps are the directory entry ops and the data ops not yet durable, in log order.
func (t *Tracker) pendingOps() (entries, data []*Op) {
	seen := map[*Op]bool{}
	for _, ops := range t.pendingDir {
		for _, op := range ops {
			if !t.applied[op] && !seen[op] {
				seen[op] = true
				entries = append(entries, op)
			}
		}
	}
	for _, ops := range t.pendingData {
		data = append(data, ops...)
	}
	byIndex := func(a, b *Op) int { return a.Index - b.Index }
	slices.SortFunc(entries, byIndex)
	slices.SortFunc(data, byIndex)
	return entries, data
}
