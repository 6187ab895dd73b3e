package event

import "testing"

func TestDependencyConditions(t *testing.T) {
	zero, one := 0, 1
	cases := []struct {
		cond      string
		known     Status
		exit      *int
		health    Health
		met, dead bool
	}{
		{DependStart, StatusCreated, nil, "", false, false},
		{DependStart, StatusRunning, nil, "", true, false},
		{DependStart, StatusStopped, &one, "", true, false}, // it ran, then ended
		{DependStart, StatusStopped, nil, "", false, true},  // never ran: failed pull/create/start
		{DependComplete, StatusRunning, nil, "", false, false},
		{DependComplete, StatusStopped, &one, "", true, false},
		{DependComplete, StatusStopped, nil, "", true, false}, // it ended, however
		{DependSuccess, StatusRunning, nil, "", false, false},
		{DependSuccess, StatusStopped, &zero, "", true, false},
		{DependSuccess, StatusStopped, &one, "", false, true},
		{DependSuccess, StatusStopped, nil, "", false, true},
		{DependHealthy, StatusRunning, nil, HealthUnknown, false, false},
		{DependHealthy, StatusRunning, nil, HealthUnhealthy, false, false}, // may still recover
		{DependHealthy, StatusRunning, nil, HealthHealthy, true, false},
		{DependHealthy, StatusStopped, &zero, HealthHealthy, false, true},
		{"READY", StatusRunning, nil, "", false, true},
	}
	for _, c := range cases {
		met, dead := Dependency{Container: "db", Condition: c.cond}.Met(c.known, c.exit, c.health)
		if met != c.met || dead != c.dead {
			t.Errorf("%s with %s exit=%v health=%q: met=%v impossible=%v; want %v %v", c.cond, c.known, c.exit, c.health, met, dead, c.met, c.dead)
		}
	}
}
