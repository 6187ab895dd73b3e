//go:build plantedbugs

package simulation

import (
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/guard"
	"github.com/agentd/agentd/internal/model"
)

// With the CleanupAfterAck guard off (internal/guard), the projection lacks the stopped-acked guard (the seed's bug). The
// simulation must find it — a cleanup before the control plane accepted the task's STOPPED —
// within a bounded number of seeds, or it proves nothing by passing.
func TestSimFindsTheSeedBug(t *testing.T) {
	if why := guard.SkipUnlessOff(guard.CleanupAfterAck); why != "" {
		t.Skip(why)
	}
	const bound = 200
	for s := uint64(1); s <= bound; s++ {
		r := runSeed(t, s)
		if strings.HasPrefix(r.Failure, "GUARD") {
			t.Logf("seed %d finds the planted bug after %d steps: %s\nthe steps about it:\n%s\nthe protocol model: %s", s, r.Steps, r.Failure, strings.Join(r.Focus, "\n"), modelVerdict(r))
			// The independent model, sharing no code with the projection whose guard is out,
			// names the cleanup from the journal alone.
			if len(r.Model) == 0 || !strings.Contains(r.Model[0], string(model.RuleCleanupBeforeSettled)) {
				t.Fatalf("the protocol model did not name the cleanup: %s", modelVerdict(r))
			}
			if len(r.Focus) == 0 || len(r.Focus) >= r.Steps {
				t.Fatalf("the focused trace (%d lines of %d) does not narrow the run down", len(r.Focus), r.Steps)
			}
			// A failing seed replays exactly, failure and all.
			if again := runSeed(t, s); again.TraceHash != r.TraceHash || again.Failure != r.Failure {
				t.Fatalf("seed %d failed two ways:\n%s\n%s", s, r.Failure, again.Failure)
			}
			return
		}
	}
	t.Fatalf("the simulation did not find the planted bug in %d seeds", bound)
}
