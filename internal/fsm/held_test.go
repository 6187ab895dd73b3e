package fsm_test

import (
	"testing"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
)

// An exit held because it came before its container's start was journaled (Verdict.Hold) is
// handed in again when that start is journaled, dropped when its task is cleaned, and kept
// otherwise (fsm.State.HeldExitAfter): each row is a record applied and what becomes of the
// exit of t1/app, created as id-1.
func TestHeldExitAfter(t *testing.T) {
	exit := fsm.ContainerExited{Task: "t1", Container: "app", RuntimeID: "id-1", ExitCode: 3}
	for _, tc := range []struct {
		name string
		rec  event.Record
		id   string // the runtime id t1/app has when the record is applied
		want fsm.HeldFate
	}{
		{name: "its start journaled: handed in", rec: running("t1", "app"), id: "id-1", want: fsm.HandIn},
		{name: "another incarnation started: kept", rec: running("t1", "app"), id: "id-2", want: fsm.KeepHeld},
		{name: "a sibling started: kept", rec: running("t1", "side"), id: "id-1", want: fsm.KeepHeld},
		{name: "another task's container started: kept", rec: running("t2", "app"), id: "id-1", want: fsm.KeepHeld},
		{name: "its task cleaned: dropped", rec: event.Record{Task: "t1", Event: &event.TaskCleaned{}}, id: "id-1", want: fsm.DropHeld},
		{name: "another task cleaned: kept", rec: event.Record{Task: "t2", Event: &event.TaskCleaned{}}, id: "id-1", want: fsm.KeepHeld},
		{name: "its container stopped: kept", rec: event.Record{Task: "t1", Container: "app", Event: &event.ContainerTransitioned{From: event.StatusCreated, To: event.StatusStopped}}, id: "id-1", want: fsm.KeepHeld},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := fsm.New()
			for _, arn := range []string{"t1", "t2"} {
				apply(t, st, event.Record{Task: arn, Event: &event.TaskAdded{Desired: event.StatusRunning,
					Containers: []event.ContainerSpec{{Name: "app", Image: "img", Essential: true}, {Name: "side", Image: "img"}}}})
				for _, c := range []string{"app", "side"} {
					apply(t, st, event.Record{Task: arn, Container: c, Event: &event.ContainerTransitioned{From: event.StatusNone, To: event.StatusPulled}})
					apply(t, st, event.Record{Task: arn, Container: c, Event: &event.ContainerTransitioned{From: event.StatusPulled, To: event.StatusCreated, RuntimeID: tc.id}})
				}
			}
			if got := st.HeldExitAfter(tc.rec, exit); got != tc.want {
				t.Fatalf("HeldExitAfter(%s) = %d; want %d", tc.rec.Type(), got, tc.want)
			}
		})
	}
}

func running(task, ctr string) event.Record {
	return event.Record{Task: task, Container: ctr, Event: &event.ContainerTransitioned{From: event.StatusCreated, To: event.StatusRunning}}
}

func apply(t *testing.T, st *fsm.State, r event.Record) {
	t.Helper()
	r.Seq = st.LastSeq + 1
	if err := st.Apply(r); err != nil {
		t.Fatal(err)
	}
}
