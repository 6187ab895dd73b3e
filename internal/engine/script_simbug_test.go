//go:build simbug

package engine_test

import (
	"fmt"
	goruntime "runtime"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/agentd/agentd/internal/runtime"
)

// With the guard compiled out of the core (-tags simbug), the seed's race script must fail: a
// script that still passed would prove nothing about the guard.
func TestScriptsFailWithoutTheGuard(t *testing.T) {
	rec := &failureRecorder{TB: t}
	s := &script{t: rec, dir: t.TempDir(), clock: &fakeClock{now: t0}, rt: &scriptRuntime{byID: map[string]runtime.State{}}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		datadriven.RunTestAny(rec, "testdata/seed_race", s.do)
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the script did not finish in a minute")
	}
	if s.j != nil {
		s.j.Close()
	}
	if !rec.failed {
		t.Fatal("the seed_race script passed with the cleanup guard compiled out")
	}
	t.Logf("without the guard the script fails as it must: %s", rec.msg)
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
