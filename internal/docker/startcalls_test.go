package docker

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/moby/moby/client"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/runtime"
)

// fakeDocker answers the three calls a container's way to RUNNING makes (create, inspect,
// start) like the Docker Engine does for a container that runs and exits at once, and counts
// them.
type fakeDocker struct {
	mu               sync.Mutex
	agent            string
	inspects, starts int
	started          bool
}

func (f *fakeDocker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	const id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/containers/create"):
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]any{"Id": id})
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/containers/"+id+"/start"):
		f.starts++
		f.started = true // and it exits at once
		w.WriteHeader(http.StatusNoContent)
	case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/containers/"+id+"/json"):
		f.inspects++
		state := map[string]any{"Status": "created", "StartedAt": "0001-01-01T00:00:00Z", "FinishedAt": "0001-01-01T00:00:00Z"}
		if f.started {
			state = map[string]any{"Status": "exited", "ExitCode": 0, "StartedAt": "2026-01-01T00:00:00Z", "FinishedAt": "2026-01-01T00:00:01Z"}
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"Id": id, "Config": map[string]any{"Labels": map[string]string{runtime.LabelAgent: f.agent}}, "State": state})
	default:
		http.Error(w, `{"message":"unexpected call"}`, http.StatusNotImplemented)
	}
}

// The first start of a container this agent process created goes straight to the engine (it
// has never run: nothing for the guard to ask), and every later start of it is asked about
// first — so a start re-dispatched after it ran is still refused, never a second run.
func TestFirstStartOfOwnContainerMakesOneCallAndASecondIsStillGuarded(t *testing.T) {
	f := &fakeDocker{agent: "agent-1"}
	srv := httptest.NewServer(f)
	defer srv.Close()
	cli, err := client.New(client.WithHost("tcp://"+strings.TrimPrefix(srv.URL, "http://")), client.WithAPIVersion("1.41"))
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	e := &Engine{cli: cli, agent: f.agent, host: srv.URL, ident: identity{kind: kindDocker}}
	ctx := context.Background()
	id, err := e.Create(ctx, runtime.CreateSpec{Task: "task/once", Container: event.ContainerSpec{Name: "app", Image: "img"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx, id); err != nil {
		t.Fatalf("first start: %v", err)
	}
	if f.inspects != 0 || f.starts != 1 {
		t.Fatalf("first start of a container created here: %d inspects, %d starts; want 0 and 1", f.inspects, f.starts)
	}
	err = e.Start(ctx, id)
	if !errors.Is(err, runtime.ErrAlreadyStarted) {
		t.Fatalf("second start of a container that ran: %v; want ErrAlreadyStarted", err)
	}
	if f.inspects != 1 || f.starts != 1 {
		t.Fatalf("second start: %d inspects, %d starts in all; want the guard's inspect and no second start", f.inspects, f.starts)
	}

	// Another process of the same agent (a restart) knows nothing of the container: it asks.
	e2 := &Engine{cli: cli, agent: f.agent, host: srv.URL, ident: identity{kind: kindDocker}}
	if err := e2.Start(ctx, id); !errors.Is(err, runtime.ErrAlreadyStarted) || f.starts != 1 {
		t.Fatalf("start after a restart: %v, %d starts; want ErrAlreadyStarted and still one start", err, f.starts)
	}
}
