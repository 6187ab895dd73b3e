package fsm_test

import (
	"testing"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
)

// TestDependencyDeadlines: the rules of depends_on with start_timeout_s, read at a given now.
// web waits for db (HEALTHY, db running with the given health) and, in some cases, for init
// (COMPLETE); the task arrived at t0.
func TestDependencyDeadlines(t *testing.T) {
	secs := func(n int) *int { return &n }
	cases := []struct {
		name         string
		dbTimeout    *int
		initTimeout  *int // init's start_timeout_s (web depends on init only with dependsInit)
		dependsInit  bool
		health       event.Health
		dbExit       *int // db stopped with this code
		webEssential bool
		at           time.Duration
		// want: "start", "wait <reason prefix>", or "stop <reason>" with "+task" when the stop
		// stops the task
		want string
		wake time.Duration // the wake asked for (0: none)
	}{
		{name: "no timeout waits", health: event.HealthUnhealthy, webEssential: true, at: 72 * time.Hour,
			want: "wait waiting for db HEALTHY, 72h0m0s (db is RUNNING, UNHEALTHY)"},
		{name: "before the deadline", dbTimeout: secs(30), health: event.HealthUnhealthy, webEssential: true, at: 29*time.Second + 999*time.Millisecond,
			want: "wait waiting for db HEALTHY, 29s (db is RUNNING, UNHEALTHY, start_timeout_s 30)", wake: 30 * time.Second},
		{name: "at the deadline", dbTimeout: secs(30), health: event.HealthUnhealthy, webEssential: true, at: 30 * time.Second,
			want: "stop not started: dependency db HEALTHY not met within start_timeout_s 30 +task"},
		{name: "met in time", dbTimeout: secs(30), health: event.HealthHealthy, webEssential: true, at: 10 * time.Minute, want: "start"},
		{name: "zero: must hold when web is ready", dbTimeout: secs(0), health: event.HealthUnhealthy, webEssential: true, at: 0,
			want: "stop not started: dependency db HEALTHY not met within start_timeout_s 0 +task"},
		{name: "non-essential dependent: the task goes on", dbTimeout: secs(30), health: event.HealthUnhealthy, at: time.Minute,
			want: "stop not started: dependency db HEALTHY not met within start_timeout_s 30"},
		{name: "ended without meeting it wins over the deadline", dbTimeout: secs(30), dbExit: secs(1), webEssential: false, at: time.Minute,
			want: "stop not started: dependency db (HEALTHY) can no longer be met: it exited with code 1 +task"},
		{name: "the earliest deadline wakes", dbTimeout: secs(300), dependsInit: true, initTimeout: secs(60), health: event.HealthUnhealthy, webEssential: true, at: time.Second,
			want: "wait waiting for db HEALTHY and init COMPLETE, 1s (db is RUNNING, UNHEALTHY, start_timeout_s 300; init is RUNNING, start_timeout_s 60)", wake: time.Minute},
		{name: "one of two runs out", dbTimeout: secs(300), dependsInit: true, initTimeout: secs(60), health: event.HealthUnhealthy, webEssential: true, at: time.Minute,
			want: "stop not started: dependency init COMPLETE not met within start_timeout_s 60 +task"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			db := event.ContainerSpec{Name: "db", Image: "db", Essential: false, StartTimeoutS: c.dbTimeout,
				HealthCheck: &event.HealthCheck{Command: []string{"CMD", "x"}}}
			initC := event.ContainerSpec{Name: "init", Image: "init", StartTimeoutS: c.initTimeout}
			web := event.ContainerSpec{Name: "web", Image: "web", Essential: c.webEssential,
				DependsOn: []event.Dependency{{Container: "db", Condition: event.DependHealthy}}}
			if c.dependsInit {
				web.DependsOn = append(web.DependsOn, event.Dependency{Container: "init", Condition: event.DependComplete})
			}
			st := fsm.New()
			seq := uint64(0)
			apply := func(ctr string, e event.Event) {
				seq++
				if err := st.Apply(event.Record{Seq: seq, Time: t0, Task: "svc", Container: ctr, Event: e}); err != nil {
					t.Fatal(err)
				}
			}
			apply("", &event.TaskAdded{Desired: event.StatusRunning, Containers: []event.ContainerSpec{db, initC, web}})
			for _, name := range []string{"db", "init", "web"} {
				apply(name, &event.ContainerTransitioned{From: event.StatusNone, To: event.StatusPulled})
				apply(name, &event.ContainerTransitioned{From: event.StatusPulled, To: event.StatusCreated, RuntimeID: "id-" + name})
				if name != "web" {
					apply(name, &event.ContainerTransitioned{From: event.StatusCreated, To: event.StatusRunning})
				}
			}
			if c.health != "" {
				apply("db", &event.HealthChanged{Health: c.health})
			}
			if c.dbExit != nil {
				apply("db", &event.ContainerTransitioned{From: event.StatusRunning, To: event.StatusStopped, ExitCode: c.dbExit})
			}
			now := t0.Add(c.at)
			d := st.Decide(now, fsm.Config{CleanupWait: time.Hour}, "svc")
			task := st.Tasks["svc"]
			w, waiting := task.Waiting(task.Container("web"), now)
			got := ""
			for _, a := range d.Actions {
				if a.Container == "web" && a.Kind == fsm.ActStart {
					got = "start"
				}
			}
			for _, r := range d.Records {
				if e, ok := r.Event.(*event.ContainerTransitioned); ok && r.Container == "web" && e.To == event.StatusStopped {
					got = "stop " + e.Reason
					if e.StopsTask {
						got += " +task"
					}
				}
			}
			if waiting {
				if got != "" {
					t.Fatalf("web both waits (%s) and is decided: %s", w.Reason(now), got)
				}
				got = "wait " + w.Reason(now)
			}
			if got != c.want {
				t.Errorf("got  %q\nwant %q", got, c.want)
			}
			var wake time.Duration
			for _, wk := range d.Wakes {
				if wk.Task != "svc" {
					t.Errorf("wake for %q", wk.Task)
				}
				wake = wk.At.Sub(t0)
			}
			if len(d.Wakes) > 1 || wake != c.wake {
				t.Errorf("wakes %+v; want at most one, at +%s (0: none)", d.Wakes, c.wake)
			}
			// The same projection and now always give the same decisions (Decide is pure).
			if again := st.Decide(now, fsm.Config{CleanupWait: time.Hour}, "svc"); len(again.Records) != len(d.Records) || len(again.Wakes) != len(d.Wakes) {
				t.Errorf("Decide twice at the same now differs")
			}
		})
	}
}
