package introspect_test

import (
	"bytes"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/rs/zerolog"

	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/introspect"
	"github.com/agentd/agentd/internal/simruntime"
)

func TestContainerLogsByTaskAndName(t *testing.T) {
	spec := []event.ContainerSpec{{Name: "app", Image: "web", Command: []string{"exit", "3"}, Essential: true,
		Env: map[string]string{"TOKEN": "s3cret"}, MemoryMiB: 64, Ports: []event.PortMapping{{ContainerPort: 8080, Protocol: "tcp"}}}}
	j, dir := journalWith(t, event.Record{Time: time.Now(), Task: "task/7f3a", Event: &event.TaskAdded{Desired: event.StatusRunning, Containers: spec}})
	rt, _ := simruntime.Open(dir, "agent-1", nil)
	e := engine.New(engine.Config{AgentID: "agent-1", CleanupWait: time.Hour}, j, rt, nil, nil, nil, zerolog.Nop())
	h := introspect.Handler(e, introspect.Info{Version: "test", DataDir: dir, Runtime: "sim", Logs: rt}, fsm.Config{CleanupWait: time.Hour})
	running(t, e)
	// Wait for the container to run and end (a journaled exit code), bounded.
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, m := get(t, h, "/v1/tasks/task/7f3a")
		if cs, _ := m["containers"].([]any); len(cs) == 1 && cs[0].(map[string]any)["exit_code"] != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the container never ran: %v", m)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The task's view shows the container's §4 fields, never its env.
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/v1/tasks/task/7f3a", nil))
	if b := w.Body.String(); !strings.Contains(b, `"memory_mib": 64`) || !strings.Contains(b, `"container_port": 8080`) || strings.Contains(b, "s3cret") {
		t.Fatalf("task view: %s", b)
	}
	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/v1/tasks/task/7f3a/containers/app/logs", nil))
	if w.Code != 200 || w.Body.String() != "testbox: [exit 3]\nexited 3\n" {
		t.Fatalf("plain logs: %d %q", w.Code, w.Body.String())
	}
	// A container's output is never taken for HTML by a browser.
	if got := w.Header().Get("X-Content-Type-Options"); got != "nosniff" {
		t.Errorf("logs answer: X-Content-Type-Options %q; want nosniff", got)
	}
	// agentd logs asks for the multiplexed stream and keeps stdout and stderr apart.
	r := httptest.NewRequest("GET", "/v1/tasks/task/7f3a/containers/app/logs?tail=1", nil)
	r.Header.Set("Accept", introspect.MultiplexedStream)
	w = httptest.NewRecorder()
	h.ServeHTTP(w, r)
	var out, errOut bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &errOut, w.Body); err != nil || w.Header().Get("Content-Type") != introspect.MultiplexedStream {
		t.Fatalf("multiplexed answer: %v %q", err, w.Header().Get("Content-Type"))
	}
	if out.Len() != 0 || errOut.String() != "exited 3\n" {
		t.Fatalf("tail=1: stdout %q stderr %q", out.String(), errOut.String())
	}
	for path, want := range map[string]int{
		"/v1/tasks/task/7f3a/containers/app/logs?tail=-1":    400,
		"/v1/tasks/task/7f3a/containers/app/logs?follow=yes": 400,
		"/v1/tasks/task/7f3a/containers/ghost/logs":          404,
		"/v1/tasks/task/nope/containers/app/logs":            404,
		"/v1/tasks/task/7f3a/containers/app/logs?tail=0":     200,
		"/v1/tasks/task/7f3a/containers/app/logs?follow=1":   200, // the sim has nothing more to follow
	} {
		if code, m := get(t, h, path); code != want {
			t.Errorf("%s: HTTP %d %v; want %d", path, code, m, want)
		}
	}
}
