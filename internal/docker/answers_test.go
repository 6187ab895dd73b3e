package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/runtime"
)

// Where Docker and Podman answer the same question differently, the engine reads both the one
// way (issue 46); these are the readings, without an engine.

// The start-up sweep removes a bind volume only when it carries this agent's id exactly,
// whatever the server's filter let through: Podman ORs the dangling and label filters.
func TestTheSweepTakesOnlyThisAgentsBindVolumes(t *testing.T) {
	e := &Engine{agent: "agent-1"}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   bool
	}{
		{BindVolumePrefix + "a", map[string]string{runtime.LabelAgent: "agent-1"}, true},
		{BindVolumePrefix + "b", map[string]string{runtime.LabelAgent: "agent-1-other"}, false},
		{BindVolumePrefix + "c", map[string]string{runtime.LabelAgent: "agent-"}, false},
		{BindVolumePrefix + "d", map[string]string{"io.agentd.agent.x": "agent-1"}, false},
		{BindVolumePrefix + "e", nil, false},
		{"pgdata", map[string]string{runtime.LabelAgent: "agent-1"}, false},
	} {
		if got := e.sweepable(c.name, c.labels); got != c.want {
			t.Errorf("volume %s labelled %v: sweepable %v; want %v", c.name, c.labels, got, c.want)
		}
	}
}

// Podman's "stopped" (exited, not yet cleaned up, as an inspect at the die can read it) is an
// exit, as Docker's "exited" is: a container read between the two is never taken for one
// still to end.
func TestPodmansStoppedIsAnExit(t *testing.T) {
	for s, want := range map[container.ContainerState][2]bool{
		"running": {true, false}, "paused": {true, false}, "restarting": {true, false},
		"exited": {false, true}, "dead": {false, true}, "stopped": {false, true},
		"created": {false, false}, "removing": {false, false},
	} {
		if running, exited := phase(s); running != want[0] || exited != want[1] {
			t.Errorf("%q: running %v, exited %v; want %v, %v", s, running, exited, want[0], want[1])
		}
	}
}

// A container's own stop timeout is the one its create recorded; Podman's 0 for "none" is
// not taken for an immediate kill.
func TestTheOwnStopTimeoutIsWhatTheCreateRecorded(t *testing.T) {
	n := func(v int) *int { return &v }
	for _, c := range []struct {
		why  string
		cfg  *container.Config
		want *int
	}{
		{"none given, Podman's 0", &container.Config{StopTimeout: n(0), Labels: map[string]string{}}, nil},
		{"none given, Docker's nil", &container.Config{}, nil},
		{"30 given", &container.Config{StopTimeout: n(30), Labels: map[string]string{runtime.LabelStopTimeout: "30"}}, n(30)},
		{"0 given", &container.Config{StopTimeout: n(0), Labels: map[string]string{runtime.LabelStopTimeout: "0"}}, n(0)},
		{"made before the label, 5", &container.Config{StopTimeout: n(5)}, n(5)},
		{"a label no create wrote", &container.Config{StopTimeout: n(5), Labels: map[string]string{runtime.LabelStopTimeout: "soon"}}, nil},
		{"no config", nil, nil},
	} {
		got := ownStopTimeout(c.cfg)
		if (got == nil) != (c.want == nil) || got != nil && *got != *c.want {
			t.Errorf("%s: own stop timeout %v; want %v", c.why, show(got), show(c.want))
		}
	}
	// The label is the agent's: a task's own is dropped, the spec's is written.
	sec := 7
	spec := runtime.CreateSpec{Task: "t", Container: event.ContainerSpec{Name: "app", Image: "i", Labels: map[string]string{runtime.LabelStopTimeout: "0"}, StopTimeoutS: &sec}}
	cfg, _, err := containerConfig(spec, map[string]string{runtime.LabelAgent: "a"}, nil)
	if err != nil || cfg.Labels[runtime.LabelStopTimeout] != "7" {
		t.Fatalf("labels %v, %v; want the spec's 7", cfg.Labels, err)
	}
	spec.Container.StopTimeoutS = nil
	if cfg, _, _ := containerConfig(spec, map[string]string{runtime.LabelAgent: "a"}, nil); cfg.Labels[runtime.LabelStopTimeout] != "" {
		t.Fatalf("labels %v; want no stop timeout label without one in the spec", cfg.Labels)
	}
}

// A name conflict is Docker's 409 or Podman's 500 saying so.
func TestANameConflictIsReadFromEitherEngine(t *testing.T) {
	podman := errors.New(`Error response from daemon: container create: creating container storage: the container name "x" is already in use by 27b3. You have to remove that container to be able to reuse that name: that name is already in use`)
	if !nameConflict(podman) || nameConflict(errors.New("no such image")) || nameConflict(nil) {
		t.Fatal("Podman's name conflict not read as one, or another error read as one")
	}
}

func show(p *int) string {
	if p == nil {
		return "none"
	}
	return fmt.Sprint(*p)
}

// A forced remove that meets the container exiting at that moment is asked again; any other
// failure is returned at once and gone already is success. The answers go through the real
// client over HTTP, so each is classed as the client classes Docker's and Podman's.
func TestAForcedRemoveOutlastsAContainerExitingUnderIt(t *testing.T) {
	const id = "0123456789ab"
	notRunning := fmt.Sprintf("Could not kill running container %s, cannot remove - Container %s is not running", id, id)
	for _, c := range []struct {
		why     string
		answers []int // status codes, in order; 204 ends the calls
		message string
		calls   int
		fails   bool
	}{
		{"Docker's kill found it exited (a 500)", []int{500, 204}, notRunning, 2, false},
		{"Podman's container state improper", []int{500, 500, 204}, "container state improper", 3, false},
		{"another removal under way (a 409)", []int{409, 204}, "removal already in progress", 2, false},
		{"gone already", []int{404}, "No such container", 1, false},
		{"any other failure", []int{500}, "driver failed", 1, true},
		{"exiting for longer than the bound", []int{500, 500, 500, 500, 500, 500, 500}, notRunning, removeTries, true},
	} {
		t.Run(c.why, func(t *testing.T) {
			calls := 0
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodDelete || !strings.HasSuffix(r.URL.Path, "/containers/"+id) {
					http.Error(w, `{"message":"unexpected call"}`, http.StatusNotImplemented)
					return
				}
				code := c.answers[min(calls, len(c.answers)-1)]
				calls++
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(code)
				if code != http.StatusNoContent {
					_ = json.NewEncoder(w).Encode(map[string]string{"message": c.message})
				}
			}))
			defer srv.Close()
			cli, err := client.New(client.WithHost("tcp://"+strings.TrimPrefix(srv.URL, "http://")), client.WithAPIVersion("1.41"))
			if err != nil {
				t.Fatal(err)
			}
			defer cli.Close()
			err = (&Engine{cli: cli}).forceRemove(context.Background(), id)
			if (err != nil) != c.fails || calls != c.calls {
				t.Fatalf("forceRemove: %v after %d calls; want failed %v after %d", err, calls, c.fails, c.calls)
			}
		})
	}
}
