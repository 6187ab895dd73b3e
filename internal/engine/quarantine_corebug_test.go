//go:build plantedbugs

package engine_test

import (
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/guard"
	"github.com/agentd/agentd/internal/testrig"
)

// With the SettleRule guard off (internal/guard) the core makes a stopped_acked for a STOPPED task whose change the
// control plane has not settled, and the projection refuses it. The refused record must never
// reach the journal (today's shape journaled it, and every later start failed on it): the
// task is quarantined and named in health, the rest of the agent goes on, a restart succeeds
// and `journal verify` finds nothing.
func TestRefusedRecordIsNeverJournaled(t *testing.T) {
	if why := guard.SkipUnlessOff(guard.SettleRule); why != "" {
		t.Skip(why)
	}
	r := newRig(t, time.Hour)
	r.cp.Answer = testrig.Throttle // the STOPPED is never settled: the planted rule fires on every decision
	r.assign("task/bad", "RUNNING", ctr("app", "sleep", "1s", "0"))
	r.advance(2 * time.Second)

	if r.known("task/bad") != event.StatusStopped {
		t.Fatalf("task/bad is %s, want STOPPED (the refused stopped_acked changed nothing)", r.known("task/bad"))
	}
	if n := len(r.records("task/bad", event.TypeStoppedAcked)); n != 0 {
		t.Fatalf("%d refused stopped_acked records journaled", n)
	}
	if q := r.e.Quarantined("task/bad"); !strings.Contains(q, "stopped_acked") {
		t.Fatalf("task/bad not quarantined: %q", q)
	}
	if h := r.e.Unhealthy(); !strings.Contains(h, "core: ") || !strings.Contains(h, "task/bad") {
		t.Fatalf("health does not name the quarantined task: %q", h)
	}
	if n := refusedCount(t, r); n < 1 {
		t.Fatalf("agentd_core_refused_records_total = %v", n)
	}

	// The rest of the agent goes on.
	r.cp.Answer = testrig.SettleAll
	r.assign("task/good", "RUNNING", ctr("app"))
	r.advance(time.Second)
	if r.known("task/good") != event.StatusRunning {
		t.Fatalf("task/good is %s after another task was quarantined", r.known("task/good"))
	}

	// A restart succeeds (rig.start fails the test if Recover does), and the journal verifies.
	r.crash()
	r.advance(time.Second)
	if r.known("task/good") != event.StatusRunning {
		t.Fatalf("task/good is %s after the restart", r.known("task/good"))
	}
	r.verify()
}

func refusedCount(t *testing.T, r *rig) float64 {
	t.Helper()
	mfs, err := r.e.Metrics().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "agentd_core_refused_records_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}
