package docker

import (
	"context"
	"testing"
	"time"

	"github.com/moby/moby/api/types/events"
)

// The exit stream's order and OOM rules, without an engine: the inspect is scripted.
func TestExitStreamWaitsForTheOOMOfA137(t *testing.T) {
	die := func(id, code string, at int64) events.Message {
		return events.Message{Action: events.ActionDie, TimeNano: at, Actor: events.Actor{ID: id, Attributes: map[string]string{"exitCode": code, LabelTask: "task/" + id, LabelContainer: "app"}}}
	}
	oom := func(id string) events.Message {
		return events.Message{Action: events.ActionOOM, Actor: events.Actor{ID: id}}
	}
	steps := []struct {
		name    string
		events  []events.Message
		oomSays map[string]bool // what inspect reads from this step on
		expire  bool            // the head's wait runs out
		want    []Exit          // sent, in order, after the events (and the expiry)
	}{
		{name: "a plain exit leaves at once", events: []events.Message{die("a", "0", 1)},
			want: []Exit{{ID: "a", ExitCode: 0}}},
		{name: "die 137 before its oom, inspect not yet OOMKilled: held, then an OOM kill", events: []events.Message{die("b", "137", 2), die("c", "3", 3)},
			want: nil},
		{name: "the oom arrives", events: []events.Message{oom("b")},
			want: []Exit{{ID: "b", ExitCode: 137, OOMKilled: true}, {ID: "c", ExitCode: 3}}},
		{name: "oom before die: known at once", events: []events.Message{oom("d"), die("d", "137", 4)},
			want: []Exit{{ID: "d", ExitCode: 137, OOMKilled: true}}},
		{name: "a 137 whose oom never comes: held until the wait ends", events: []events.Message{die("e", "137", 5)},
			want: nil},
		{name: "the wait ends: inspected again, a kill for another cause", expire: true,
			want: []Exit{{ID: "e", ExitCode: 137}}},
		{name: "a 137 the inspect at die already shows OOM-killed", events: []events.Message{die("f", "137", 6)}, oomSays: map[string]bool{"f": true},
			want: []Exit{{ID: "f", ExitCode: 137, OOMKilled: true}}},
		{name: "another 137 held", events: []events.Message{die("g", "137", 7)},
			want: nil},
		{name: "its wait ends, the repeated inspect shows the OOM kill", expire: true, oomSays: map[string]bool{"g": true},
			want: []Exit{{ID: "g", ExitCode: 137, OOMKilled: true}}},
		{name: "a 137 of a container without a memory limit leaves at once", events: []events.Message{die("h", "137", 8)},
			want: []Exit{{ID: "h", ExitCode: 137}}},
	}
	inspectSays := map[string]bool{}
	s := exitStream{wait: time.Hour, ooms: map[string]time.Time{}, inspect: func(_ context.Context, id string) (exitState, error) {
		return exitState{oomKilled: inspectSays[id], memoryLimited: id != "h"}, nil
	}}
	ctx := context.Background()
	for _, st := range steps {
		for id, v := range st.oomSays {
			inspectSays[id] = v
		}
		for _, m := range st.events {
			s.event(ctx, m)
		}
		if st.expire {
			s.expire(ctx)
		}
		out := make(chan Exit, 10)
		s.flush(ctx, out)
		close(out)
		var got []Exit
		for x := range out {
			got = append(got, x)
		}
		if len(got) != len(st.want) {
			t.Fatalf("%s: sent %+v; want %+v", st.name, got, st.want)
		}
		for i, w := range st.want {
			if g := got[i]; g.ID != w.ID || g.ExitCode != w.ExitCode || g.OOMKilled != w.OOMKilled || g.Task != "task/"+w.ID {
				t.Fatalf("%s: exit %d is %+v; want %+v", st.name, i, g, w)
			}
		}
	}
}
