package simulation

import (
	"os"
	"runtime/debug"
	"testing"
)

// simGCPercent is the collector's target while the seeds run, unless $GOGC says otherwise. A
// seed allocates a whole agent's worth of short-lived garbage (journal pages decoded, payloads,
// projections rebuilt after every crash) and keeps almost none of it, so at the default of 100
// a third of the package's CPU went to collecting; at 400 the live heap stays near 40 MB. A
// run is a function of its seed alone (TestSimIsDeterministic), never of when the collector
// runs, so this changes how fast the seeds go, not what they find.
const simGCPercent = 400

func TestMain(m *testing.M) {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(simGCPercent)
	}
	os.Exit(m.Run())
}
