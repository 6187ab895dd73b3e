package engine_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/testrig"
)

// After a burst of tasks has gone through, the agent gives the heap it left behind back to
// the OS once it is idle (issue 25: the same process held 99–139 MB after 20,000 tasks, where
// restarted it needs 40). It does so once, only after five idle seconds, not while the burst
// runs, and never for a trickle of tasks, whose memory the runtime reuses.
func TestTheAgentReleasesMemoryOnceIdleAfterABurst(t *testing.T) {
	t.Parallel()
	released := 0
	r := &rig{t: t, dir: fastDir(t), clock: testrig.NewClock(t0),
		cp: &testrig.ControlPlane{},
		cfg: engine.Config{CleanupWait: 0, CleanupJitter: -1, Seed: 1, Retention: time.Hour,
			ReleaseMemory: func() { released++ }}}
	r.start()
	t.Cleanup(func() { r.j.Close() })

	for i := range 300 { // a task a second, each done before the next
		r.assign(fmt.Sprintf("task/trickle-%04d", i), "RUNNING", ctr("app", "exit", "0"))
		r.advance(time.Second)
	}
	r.advance(time.Minute)
	if released != 0 {
		t.Fatalf("a trickle of tasks released memory %d times", released)
	}

	const burst = 1500
	for i := range burst { // all at once: live together, each exiting a millisecond after the last
		r.assign(fmt.Sprintf("task/burst-%04d", i), "RUNNING", ctr("app", "sleep", fmt.Sprintf("%dms", i+1)))
	}
	if n := len(r.e.State().Tasks); n < burst*9/10 {
		t.Fatalf("%d tasks live after the burst arrived, of %d", n, burst)
	}
	r.advance(3 * time.Second)
	for i := range burst {
		if arn := fmt.Sprintf("task/burst-%04d", i); r.known(arn) != event.StatusCleaned {
			t.Fatalf("%s is %s three seconds after the burst came", arn, r.known(arn))
		}
	}
	if released != 0 {
		t.Fatalf("memory released %d times while the burst went through: not idle yet", released)
	}
	r.advance(4 * time.Second)
	if released != 1 {
		t.Fatalf("memory released %d times once idle after the burst, want once", released)
	}
	r.advance(time.Hour)
	if released != 1 {
		t.Errorf("memory released %d times in the idle hour after, want once", released)
	}
}
