package forensics

// One record of one host is named by the host's agent id and the record's sequence number,
// whoever keeps or ships it: a journal, its export copy, a log pipeline (which sees every record
// at least once). When several sources name the same record, an identical copy is kept once,
// and copies that differ are never settled silently by keeping one: every version is kept,
// marked (Entry.Conflict) and reported, naming where each came from — a record forged under
// another host's id and sequence shows up beside the real one, not in its place.

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// recordKey names one record of one host (a gap: the range of records it announces).
type recordKey struct {
	host          string
	seq, from, to uint64
}

func keyOf(e Entry) recordKey { return recordKey{e.Host, e.Seq, e.SeqFrom, e.SeqTo} }

// origin is where a version of a record was read: which file, and in it which line and which
// record of the line (zero where it does not apply).
type origin struct{ file, line, record int32 }

// version is what a version of a record says (severity is derived from it, and a mark is the
// reader's, not the record's), as a map key: versions that say the same are found in one
// look-up however many a record has (a scan of each record's versions made n forged versions
// of one record cost n² comparisons).
type version struct {
	e       Entry // without Severity, Conflict, ExitCode and Time
	sec     int64 // Time as an instant
	nsec    int
	hasExit bool
	exit    int64
}

func versionOf(e Entry) version {
	v := version{sec: e.Time.Unix(), nsec: e.Time.Nanosecond(), hasExit: e.ExitCode != nil}
	if v.hasExit {
		v.exit = *e.ExitCode
	}
	e.Severity, e.Conflict, e.ExitCode, e.Time = "", "", nil, time.Time{}
	v.e = e
	return v
}

// markSources is how many sources a version's conflict mark names at most.
const markSources = 3

// recordSet keeps each record once, and every differing version of one.
type recordSet struct {
	first    map[recordKey]int    // the index of the record's first version
	versions map[version]struct{} // every version kept
	more     map[recordKey][]int  // the versions that differ from it, if any
	entries  []Entry
	origins  []origin
	dropped  map[fileKey]bool // identical copies not kept, by where they were read
}

type fileKey struct {
	file int32
	recordKey
}

func newRecordSet() *recordSet {
	return &recordSet{first: map[recordKey]int{}, versions: map[version]struct{}{}, more: map[recordKey][]int{}, dropped: map[fileKey]bool{}}
}

// grow makes room for n more versions.
func (s *recordSet) grow(n int) {
	s.entries, s.origins = slices.Grow(s.entries, n), slices.Grow(s.origins, n)
}

// add keeps e unless a version read before says the same.
func (s *recordSet) add(e Entry, o origin) {
	k := keyOf(e)
	if _, dup := s.versions[versionOf(e)]; dup {
		s.dropped[fileKey{o.file, k}] = true
		return
	}
	s.versions[versionOf(e)] = struct{}{}
	if _, seen := s.first[k]; seen {
		s.more[k] = append(s.more[k], len(s.entries))
	} else {
		s.first[k] = len(s.entries)
	}
	s.entries = append(s.entries, e)
	s.origins = append(s.origins, o)
}

// result is every version kept, those of a record with several marked, and one warning for
// each such record naming where each version came from (where says it).
func (s *recordSet) result(where func(origin) string) ([]Entry, []string) {
	keys := slices.SortedFunc(maps.Keys(s.more), func(a, b recordKey) int {
		return cmp.Or(cmp.Compare(a.host, b.host), cmp.Compare(a.seq, b.seq), cmp.Compare(a.from, b.from))
	})
	var warnings []string
	for _, k := range keys {
		versions := append([]int{s.first[k]}, s.more[k]...)
		var from []string
		for _, v := range versions {
			from = append(from, where(s.origins[v]))
		}
		name := fmt.Sprintf("seq %d", k.seq)
		if k.from != 0 || k.to != 0 {
			name = fmt.Sprintf("gap %d-%d", k.from, k.to)
		}
		head := fmt.Sprintf("%d different records of host %s %s: ", len(versions), k.host, name)
		// Each version's mark names a few sources, not all: n versions each naming n sources
		// made a 1 MB file of forged versions a 700 MB dump. The warning names them all.
		mark := head + strings.Join(from[:min(len(from), markSources)], "; ")
		if len(from) > markSources {
			mark += fmt.Sprintf("; and %d more (see the warning)", len(from)-markSources)
		}
		for _, v := range versions {
			s.entries[v].Conflict = mark
		}
		warnings = append(warnings, head+strings.Join(from, "; ")+" (all kept, marked CONFLICT: one may be forged)")
	}
	return s.entries, warnings
}
