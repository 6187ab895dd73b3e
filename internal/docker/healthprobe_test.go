package docker

import (
	"testing"
	"time"

	"github.com/agentd/agentd/internal/event"
)

// The agent's own health checks reach Docker's verdicts from the same probes: a pass is
// healthy at once, retries failures in a row are unhealthy (a pass between them starts the
// count again), and failures inside the start period count for nothing.
func TestTheAgentsProbesFollowDockersRules(t *testing.T) {
	t0 := time.Unix(1000, 0)
	const P, F = true, false
	for _, c := range []struct {
		name        string
		retries     int
		startPeriod time.Duration
		probes      []bool
		want        []event.Health // the verdict after each probe ("" none)
	}{
		{"a pass is healthy", 3, 0, []bool{P}, []event.Health{event.HealthHealthy}},
		{"three failures, retries 3", 3, 0, []bool{F, F, F}, []event.Health{"", "", event.HealthUnhealthy}},
		{"a pass starts the count again", 2, 0, []bool{F, P, F, F}, []event.Health{"", event.HealthHealthy, "", event.HealthUnhealthy}},
		{"failures in the start period count for nothing", 1, 2500 * time.Millisecond, []bool{F, F, F}, []event.Health{"", "", event.HealthUnhealthy}},
		{"a pass in the start period is healthy", 1, time.Hour, []bool{F, P, F}, []event.Health{"", event.HealthHealthy, ""}},
	} {
		count := probeCount{retries: c.retries, startPeriodEnds: t0.Add(c.startPeriod)}
		for i, pass := range c.probes {
			at := t0.Add(time.Duration(i+1) * time.Second) // one probe a second
			got, ok := count.after(pass, at)
			if !ok {
				got = ""
			}
			if got != c.want[i] {
				t.Errorf("%s: after probe %d (pass %v): %q; want %q", c.name, i+1, pass, got, c.want[i])
			}
		}
	}
}
