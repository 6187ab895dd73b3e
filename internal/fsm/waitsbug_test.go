//go:build plantedbugs

package fsm_test

import (
	"flag"
	"fmt"
	"testing"

	"pgregory.net/rapid"

	"github.com/agentd/agentd/internal/guard"
)

// With the CallWaits guard off (internal/guard), the core's Gate lets an inspect overtake the start it settles
// (and a removal a create). The property test drives the real Gate, so it must find what
// follows — a start ended twice, or a container STOPPED while the runtime runs it — within a
// bounded number of checks. (The simulation finds it too: TestSimFindsTheWaitsBug.)
func TestPropertyFindsTheWaitsBug(t *testing.T) {
	if why := guard.SkipUnlessOff(guard.CallWaits); why != "" {
		t.Skip(why)
	}
	// Enough histories to meet the bug, no fail file left behind, and no long minimising of
	// the history found: that it is found is the point. Restored for the tests after.
	for name, v := range map[string]string{"rapid.checks": "3000", "rapid.nofailfile": "true", "rapid.shrinktime": "2s"} {
		old := flag.Lookup(name).Value.String()
		if err := flag.Set(name, v); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = flag.Set(name, old) })
	}
	found := &failureTB{T: t}
	rapid.Check(found, func(rt *rapid.T) { newWorld(rt).run(300) })
	if found.failure == "" {
		t.Fatal("3000 random histories with the waitsFor rule broken kept every invariant: the property test does not drive the engine's Gate")
	}
	t.Logf("found: %.300s", found.failure)
}

// failureTB records a failure of rapid.Check instead of failing the test.
type failureTB struct {
	*testing.T
	failure string
}

func (f *failureTB) Errorf(format string, args ...any) { f.Error(fmt.Sprintf(format, args...)) }
func (f *failureTB) Fatalf(format string, args ...any) { f.Error(fmt.Sprintf(format, args...)) }
func (f *failureTB) Fatal(args ...any)                 { f.Error(args...) }
func (f *failureTB) Error(args ...any) {
	if f.failure == "" {
		f.failure = fmt.Sprint(args...)
	}
}
func (f *failureTB) Fail()        { f.Error("failed") }
func (f *failureTB) FailNow()     { f.Error("failed") }
func (f *failureTB) Failed() bool { return f.failure != "" }
