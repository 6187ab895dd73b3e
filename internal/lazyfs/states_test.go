package lazyfs

import (
	"bytes"
	"testing"
)

// A rename over a file, as a program that replaces a file atomically does it, leaves in every
// crash state the old contents or the new ones; without the data fsync before the rename, one
// state has the new name on an empty file — the bug the states exist to show.
func TestCrashStatesOfAnAtomicReplace(t *testing.T) {
	page := bytes.Repeat([]byte("n"), 2*sector)
	base := NewImage()
	base.Apply(&Op{Kind: OpCreate, Path: "key", Ino: 1})
	base.Apply(&Op{Kind: OpWrite, Ino: 1, Data: []byte("old")})
	for _, tc := range []struct {
		name      string
		syncFirst bool
		wantTorn  bool
	}{{"fsync before rename", true, false}, {"no fsync before rename", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewTracker(NewImage(), true)
			ops := []*Op{{Kind: OpCreate, Path: "key.tmp", Ino: 2}, {Kind: OpWrite, Ino: 2, Data: page}}
			if tc.syncFirst {
				ops = append(ops, &Op{Kind: OpFsync, Ino: 2})
			}
			ops = append(ops, &Op{Kind: OpRename, Path: "key.tmp", To: "key"}, &Op{Kind: OpFsyncDir, Path: ""})
			for _, op := range ops {
				tr.Record(op)
			}
			kinds := map[StateKind]int{}
			bad := ""
			err := CrashStates(base, tr.Log(), StateOptions{}, func(s CrashState) error {
				kinds[s.Kind]++
				b, ok := s.Image.ReadFile("key")
				if !ok || (string(b) != "old" && !bytes.Equal(b, page)) {
					bad = s.What
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if (bad != "") != tc.wantTorn {
				t.Fatalf("a state with neither contents: %q (want one: %v); kinds %v", bad, tc.wantTorn, kinds)
			}
			if tc.syncFirst && (kinds[KindTorn] == 0 || kinds[KindMetadata] == 0 || kinds[KindReordered] == 0) {
				t.Fatalf("kinds %v: want torn, metadata and reordered states", kinds)
			}
		})
	}
}
