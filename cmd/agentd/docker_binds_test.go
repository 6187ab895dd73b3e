package main

import (
	"cmp"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/bindroot"
	"github.com/agentd/agentd/internal/docker"
	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/protocol"
)

// TestDockerLinkedBindSourceStopsTheTaskNamingMountAndRoot: through the built agent on the
// real engine (issue 22, item 1), a task whose bind source is a link planted in the allowed
// root is STOPPED with a reason naming the mount, the source and the root; a task binding a
// plain directory beside it reads the directory's file.
func TestDockerLinkedBindSourceStopsTheTaskNamingMountAndRoot(t *testing.T) {
	if os.Getenv("AGENTD_DOCKER_TESTS") != "1" {
		t.Skip("Docker Engine tests: run with make test-docker")
	}
	if onPodman(t) {
		t.Skip("on Podman: --allow-bind-root is refused (README \"On Podman\")")
	}
	img := cmp.Or(os.Getenv("AGENTD_TESTBOX_IMAGE"), "agentd-testbox:latest")
	base := t.TempDir()
	root, outside := filepath.Join(base, "root"), filepath.Join(base, "outside")
	for _, d := range []string{root + "/shared/ok", outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(outside+"/f", []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(root+"/shared/ok/f", []byte("inside"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, root+"/shared/escape"); err != nil {
		t.Fatal(err)
	}
	agentID := strings.ReplaceAll("agent-binds-"+time.Now().Format("150405.000"), ".", "")
	t.Cleanup(func() {
		removeLabelled("io.agentd.agent=" + agentID)
		removeVolumesLabelled("io.agentd.agent=" + agentID)
	})
	cp := startProc(t, "controlplane", "--listen", "127.0.0.1:0", "--log-format", "json")
	cpURL := "http://" + cp.await(t, "reference control plane serving (development and test tool, in memory)", 30*time.Second)["listen"].(string)
	agent := startProc(t, "run", "--runtime", "docker", "--data-dir", filepath.Join(base, "data"), "--backend", cpURL,
		"--listen", "127.0.0.1:0", "--cleanup-wait", "10m", "--log-format", "json", "--agent-id", agentID, "--allow-bind-root", root)
	api := "http://" + agent.await(t, "agent running", 60*time.Second)["listen"].(string)
	task := func(arn, src string) {
		postJSON(t, cpURL+"/v1/tasks", map[string]any{"agent": agentID, "task": map[string]any{"arn": arn, "containers": []map[string]any{
			{"name": "app", "image": img, "command": []string{"cat", "/data/f"},
				"mounts": []map[string]any{{"type": "bind", "source": src, "target": "/data", "read_only": true}}},
		}}})
	}
	task("task/escape", root+"/shared/escape")
	task("task/ok", root+"/shared/ok")
	var escape, ok cpWorkload
	deadline := time.Now().Add(90 * time.Second)
	for escape.Status != "STOPPED" || ok.Status != "STOPPED" {
		if time.Now().After(deadline) {
			t.Fatalf("not both STOPPED within 90 s: escape %+v, ok %+v\n%s", escape, ok, agent.log())
		}
		time.Sleep(100 * time.Millisecond)
		getJSON(t, cpURL+"/v1/tasks/task/escape", &escape)
		getJSON(t, cpURL+"/v1/tasks/task/ok", &ok)
	}
	want := `mounts[0].source "` + root + `/shared/escape" (target "/data"): refused beneath allowed root "` + root + `": a path component is a symbolic link`
	if !strings.Contains(escape.Reason, want) {
		t.Fatalf("STOPPED reason %q; want it to name the mount and the root: %s", escape.Reason, want)
	}
	if ids := dockerPS(t, "label=io.agentd.agent="+agentID, "label=io.agentd.task-arn=task/escape"); len(ids) != 0 {
		t.Fatalf("the refused task has containers %v", ids)
	}
	resp, err := ownClient.Get(api + "/v1/tasks/task/ok/containers/app/logs")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "inside" {
		t.Fatalf("the plain bind's container printed %q; want inside", b)
	}
	_ = agent.cmd.Process.Signal(syscall.SIGTERM)
	_ = agent.cmd.Wait()
	noViolations(t, cpURL)
}

// TestDockerBindDescriptorOfAContainerNeverStartedGoesWithItsStop (issue 41, item 6): a
// container with a bind mount, created and waiting for its dependency when its task is
// stopped, is recorded STOPPED without ever starting — and the agent lets go of its bind
// source's descriptor then, not at the task's cleanup hours later (the container is still
// there, its volume too, until that cleanup).
func TestDockerBindDescriptorOfAContainerNeverStartedGoesWithItsStop(t *testing.T) {
	if os.Getenv("AGENTD_DOCKER_TESTS") == "1" && onPodman(t) {
		t.Skip("on Podman: --allow-bind-root is refused (README \"On Podman\")")
	}
	src := filepath.Join(t.TempDir(), "root", "data")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	root := filepath.Dir(src)
	r := newGCRig(t, "agent-binds-unstarted", func(cfg *engine.Config, rt *docker.Engine) {
		t.Cleanup(func() { // the containers first: a volume in use is not removed
			removeLabelled("io.agentd.agent=" + cfg.AgentID)
			removeVolumesLabelled("io.agentd.agent=" + cfg.AgentID)
		})
		roots, err := bindroot.Open([]string{root})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { roots.Close() })
		if err := rt.SetBindRoots(roots); err != nil {
			t.Fatal(err)
		}
		if cfg.TaskRules, err = protocol.NewRules([]string{root}); err != nil {
			t.Fatal(err)
		}
	})
	img := cmp.Or(os.Getenv("AGENTD_TESTBOX_IMAGE"), "agentd-testbox:latest")
	task := protocol.Task{ARN: "task/binds-unstarted", Containers: []protocol.Container{
		{Name: "dep", Image: img, Command: []string{"run"}, Essential: new(false)},
		{Name: "app", Image: img, Command: []string{"run"},
			Mounts:    []event.Mount{{Type: event.MountBind, Source: src, Target: "/data"}},
			DependsOn: []event.Dependency{{Container: "dep", Condition: event.DependComplete}}},
	}}
	r.send("RUNNING", task)
	app := r.e.State().Tasks[task.ARN].Container("app")
	if app.Known != event.StatusCreated || app.RuntimeID == "" {
		t.Fatalf("app is %s (id %q); want CREATED, waiting for dep", app.Known, app.RuntimeID)
	}
	if n := descriptorsOf(t, src); n != 1 {
		t.Fatalf("%d descriptors of the bind source while app waits to start; want 1", n)
	}
	r.send("STOPPED", task)
	app = r.e.State().Tasks[task.ARN].Container("app")
	if app.Known != event.StatusStopped || !strings.Contains(app.Reason, "not started") {
		t.Fatalf("app is %s (%s); want STOPPED, not started", app.Known, app.Reason)
	}
	if n := descriptorsOf(t, src); n != 0 {
		t.Fatalf("%d descriptors of the bind source after app was recorded stopped without starting; want 0 (not only at cleanup)", n)
	}
	if ids := dockerPS(t, "id="+app.RuntimeID); len(ids) != 1 {
		t.Fatalf("app's container is gone before cleanup: %v", ids)
	}
}

// descriptorsOf counts this process's descriptors naming dir, as the kernel shows them.
func descriptorsOf(t *testing.T, dir string) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, fd := range fds {
		if target, err := os.Readlink("/proc/self/fd/" + fd.Name()); err == nil && target == dir {
			n++
		}
	}
	return n
}

func removeVolumesLabelled(label string) {
	out, _ := exec.Command("docker", "volume", "ls", "-q", "--filter", "label="+label).Output()
	for _, v := range strings.Fields(string(out)) {
		_ = exec.Command("docker", "volume", "rm", "-f", v).Run()
	}
}
