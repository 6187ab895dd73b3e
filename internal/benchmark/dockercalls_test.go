package benchmark

import "testing"

// Calls are told apart by kind without their ids, and a task's own calls from the session's,
// so calls per task compare the bare loop's create/start/wait/remove with the agent's.
func TestCallKindsAndWhatATaskCosts(t *testing.T) {
	for _, c := range []struct {
		method, path, kind string
		task               bool
	}{
		{"POST", "/v1.41/containers/create", "POST /containers/create", true},
		{"POST", "/v1.41/containers/0123abcd/start", "POST /containers/{id}/start", true},
		{"GET", "/v1.41/containers/0123abcd/json", "GET /containers/{id}/json", true},
		{"POST", "/v1.41/containers/0123abcd/wait", "POST /containers/{id}/wait", true},
		{"DELETE", "/v1.41/containers/0123abcd", "DELETE /containers/{id}", true},
		{"GET", "/v1.41/images/agentd-testbox:latest/json", "GET /images/{ref}/json", true},
		{"GET", "/v1.41/images/127.0.0.1:5000/team/app:1/json", "GET /images/{ref}/json", true},
		{"POST", "/v1.41/images/create", "POST /images/create", true},
		{"GET", "/v1.41/containers/json", "GET /containers/json", false},
		{"GET", "/v1.41/events", "GET /events", false},
		{"HEAD", "/_ping", "HEAD /_ping", false},
		{"GET", "/v1.41/volumes", "GET /volumes", false},
	} {
		if k := callKind(c.method, c.path); k != c.kind || perTask(k) != c.task {
			t.Errorf("%s %s: kind %q (a task's: %v), want %q (%v)", c.method, c.path, k, perTask(k), c.kind, c.task)
		}
	}
	var d DockerCalls
	d.add(map[string]int{"POST /containers/create": 10, "POST /containers/{id}/start": 10, "DELETE /containers/{id}": 10,
		"GET /images/{ref}/json": 10, "GET /events": 1, "HEAD /_ping": 1}, 10)
	d.add(map[string]int{"POST /containers/create": 10, "POST /containers/{id}/start": 10, "DELETE /containers/{id}": 10,
		"GET /images/{ref}/json": 10, "GET /events": 1, "HEAD /_ping": 1}, 10)
	d.done()
	if d.PerTask != 4 || d.SessionPerRun != 2 || d.ByKind["POST /containers/create"] != 1 {
		t.Fatalf("two runs of 10 tasks: %.2f a task, %.1f a run (%v), want 4 and 2", d.PerTask, d.SessionPerRun, d.ByKind)
	}
}
