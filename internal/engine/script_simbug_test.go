//go:build plantedbugs

package engine_test

import (
	"fmt"
	goruntime "runtime"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/agentd/agentd/internal/guard"
	"github.com/agentd/agentd/internal/runtime"
	"github.com/agentd/agentd/internal/testrig"
)

// With a guard off (internal/guard), the scripts that prove it must fail: with CleanupAfterAck
// off, the seed's race script and the explorer's counterexample (explored_cleanup_after_ack,
// written by internal/explore); with LateStartFence off, the explorer's late start, the
// failed restart and the container made again after its fence. A script that still passed
// would prove nothing about its guard.
func TestScriptsFailWithoutTheGuard(t *testing.T) {
	off := map[guard.Name][]string{
		guard.CleanupAfterAck: {"seed_race", "explored_cleanup_after_ack"},
		guard.LateStartFence:  {"explored_late_start", "explored_failed_restart", "made_again"},
	}
	var names []string
	for g, scripts := range off {
		if guard.SkipUnlessOff(g) == "" {
			names = append(names, scripts...)
		}
	}
	if len(names) == 0 {
		t.Skip(guard.SkipUnlessOff(guard.CleanupAfterAck) + " or " + string(guard.LateStartFence))
	}
	for _, name := range names {
		rec := &failureRecorder{TB: t}
		s := &script{t: rec, dir: t.TempDir(), clock: testrig.NewClock(t0), rt: &scriptRuntime{byID: map[string]runtime.State{}}}
		done := make(chan struct{})
		go func() {
			defer close(done)
			datadriven.RunTestAny(rec, "testdata/"+name, s.do)
		}()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatalf("the script %s did not finish in a minute", name)
		}
		if s.j != nil {
			s.j.Close()
		}
		if !rec.failed {
			t.Fatalf("the %s script passed with its guard off", name)
		}
		t.Logf("without the guard %s fails as it must: %s", name, rec.msg)
	}
}

// failureRecorder is a testing.TB whose failures are recorded instead of failing the test.
type failureRecorder struct {
	testing.TB
	mu     sync.Mutex
	failed bool
	msg    string
}

func (r *failureRecorder) record(msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = true
	if r.msg == "" {
		r.msg = msg
	}
}
func (r *failureRecorder) Fatal(args ...any) { r.record(fmt.Sprint(args...)); goruntime.Goexit() }
func (r *failureRecorder) Fatalf(format string, args ...any) {
	r.record(fmt.Sprintf(format, args...))
	goruntime.Goexit()
}
func (r *failureRecorder) Error(args ...any)                 { r.record(fmt.Sprint(args...)) }
func (r *failureRecorder) Errorf(format string, args ...any) { r.record(fmt.Sprintf(format, args...)) }
func (r *failureRecorder) FailNow()                          { r.record("FailNow"); goruntime.Goexit() }
func (r *failureRecorder) Fail()                             { r.record("Fail") }
func (r *failureRecorder) Failed() bool                      { r.mu.Lock(); defer r.mu.Unlock(); return r.failed }
func (r *failureRecorder) Helper()                           {}
