package simruntime

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/runtime"
)

func runSpec(t *testing.T, s *Runtime, task string, spec event.ContainerSpec) string {
	t.Helper()
	ctx := context.Background()
	if spec.Name == "" {
		spec.Name = "app"
	}
	spec.Image = "img"
	id, err := s.Create(ctx, runtime.CreateSpec{Task: task, Container: spec})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	return id
}

func TestSimAssignsHostPortsLikeDocker(t *testing.T) {
	s, _ := newTestRuntime(t)
	ctx := context.Background()
	a := runSpec(t, s, "task/a", event.ContainerSpec{Command: []string{"serve", "8080"},
		Ports: []event.PortMapping{{ContainerPort: 8080}, {ContainerPort: 9090, HostPort: 9090, HostIP: "127.0.0.1"}}})
	b := runSpec(t, s, "task/b", event.ContainerSpec{Command: []string{"serve", "8080"}, Ports: []event.PortMapping{{ContainerPort: 8080}}})
	sa, _ := s.Inspect(ctx, a)
	sb, _ := s.Inspect(ctx, b)
	want := []event.NetworkBinding{{ContainerPort: 8080, HostPort: 32768, Protocol: "tcp", HostIP: "0.0.0.0"},
		{ContainerPort: 9090, HostPort: 9090, Protocol: "tcp", HostIP: "127.0.0.1"}}
	if len(sa.Bindings) != 2 || sa.Bindings[0] != want[0] || sa.Bindings[1] != want[1] {
		t.Fatalf("bindings %+v; want %+v", sa.Bindings, want)
	}
	if len(sb.Bindings) != 1 || sb.Bindings[0].HostPort != 32769 {
		t.Fatalf("a second picked port: %+v; want 32769", sb.Bindings)
	}
	// A fixed host port a live container holds is refused; once it stopped, it is free.
	_, err := s.Create(ctx, runtime.CreateSpec{Task: "task/c", Container: event.ContainerSpec{Name: "app", Image: "img", Ports: []event.PortMapping{{ContainerPort: 1, HostPort: 9090}}}})
	if err == nil || !strings.Contains(err.Error(), "9090/tcp is already allocated") {
		t.Fatalf("second bind of 9090: %v", err)
	}
	// As on Docker: the same port on another host IP is free, in one container or two; on
	// 0.0.0.0 it overlaps 127.0.0.1.
	d := runSpec(t, s, "task/d", event.ContainerSpec{Ports: []event.PortMapping{{ContainerPort: 1, HostPort: 9090, HostIP: "127.0.0.2"},
		{ContainerPort: 2, HostPort: 9091, HostIP: "127.0.0.1"}, {ContainerPort: 3, HostPort: 9091, HostIP: "127.0.0.2"}}})
	_, err = s.Create(ctx, runtime.CreateSpec{Task: "task/e", Container: event.ContainerSpec{Name: "app", Image: "img", Ports: []event.PortMapping{{ContainerPort: 1, HostPort: 9091, HostIP: "0.0.0.0"}}}})
	if err == nil || !strings.Contains(err.Error(), "9091/tcp is already allocated") {
		t.Fatalf("9091 on 0.0.0.0 while 127.0.0.1:9091 is bound: %v", err)
	}
	_ = s.Stop(ctx, d, time.Second)
	_ = s.Stop(ctx, a, time.Second)
	if st, _ := s.Inspect(ctx, a); len(st.Bindings) != 0 {
		t.Fatalf("a stopped container reports bindings %+v", st.Bindings)
	}
	runSpec(t, s, "task/c", event.ContainerSpec{Ports: []event.PortMapping{{ContainerPort: 1, HostPort: 9090}}})
}

func TestSimKillsAnAllocOverItsMemoryLimit(t *testing.T) {
	s, _ := newTestRuntime(t)
	ctx := context.Background()
	over := runSpec(t, s, "task/over", event.ContainerSpec{Command: []string{"alloc", "128"}, MemoryMiB: 64})
	under := runSpec(t, s, "task/under", event.ContainerSpec{Command: []string{"alloc", "16"}, MemoryMiB: 64})
	unlimited := runSpec(t, s, "task/free", event.ContainerSpec{Command: []string{"alloc", "4096"}})
	if st, _ := s.Inspect(ctx, over); !st.Exited || st.ExitCode != 137 || !st.OOMKilled {
		t.Fatalf("alloc over the limit: %+v; want exited 137, OOMKilled", st)
	}
	for _, id := range []string{under, unlimited} {
		if st, _ := s.Inspect(ctx, id); !st.Running || st.OOMKilled {
			t.Fatalf("alloc within its limit: %+v; want running", st)
		}
	}
	exits, _ := s.ExitsAfter(runtime.ExitMark{})
	if len(exits) != 1 || exits[0].ID != over || !exits[0].OOMKilled {
		t.Fatalf("exits %+v; want the OOM kill, marked", exits)
	}
}

func TestSimStopTimeoutDecidesBetweenExit0And137(t *testing.T) {
	s, _ := newTestRuntime(t)
	ctx := context.Background()
	sec := func(n int) *int { return &n }
	cases := []struct {
		spec    event.ContainerSpec
		timeout time.Duration
		want    int
	}{
		{event.ContainerSpec{Command: []string{"linger", "3s"}, StopTimeoutS: sec(10)}, time.Second, 0}, // its own timeout wins
		{event.ContainerSpec{Command: []string{"linger", "3s"}, StopTimeoutS: sec(1)}, time.Minute, 137},
		{event.ContainerSpec{Command: []string{"linger", "3s"}}, 10 * time.Second, 0}, // the agent's timeout
		{event.ContainerSpec{Command: []string{"linger", "3s"}}, time.Second, 137},
		{event.ContainerSpec{Command: []string{"run"}}, time.Second, 143},
		{event.ContainerSpec{Command: []string{"run"}, StopSignal: "SIGKILL"}, time.Second, 137},
	}
	for i, tc := range cases {
		id := runSpec(t, s, "task/"+string(rune('a'+i)), tc.spec)
		if err := s.Stop(ctx, id, tc.timeout); err != nil {
			t.Fatal(err)
		}
		if st, _ := s.Inspect(ctx, id); !st.Exited || st.ExitCode != tc.want {
			t.Fatalf("case %d: %+v; want exit %d", i, st, tc.want)
		}
	}
}

func TestSimHealthVerdicts(t *testing.T) {
	s, c := newTestRuntime(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	good := runSpec(t, s, "task/good", event.ContainerSpec{Command: []string{"serve", "8080"},
		HealthCheck: &event.HealthCheck{Command: []string{"CMD", "/testbox", "probe", "8080"}, IntervalS: 2}})
	bad := runSpec(t, s, "task/bad", event.ContainerSpec{Command: []string{"serve", "8080"},
		HealthCheck: &event.HealthCheck{Command: []string{"CMD", "/testbox", "exit", "1"}, IntervalS: 2, Retries: 2, StartPeriodS: 1}})
	runSpec(t, s, "task/none", event.ContainerSpec{})
	v, next := s.Verdicts()
	if len(v) != 0 || !next.Equal(c.Now().Add(2*time.Second)) {
		t.Fatalf("before the first interval: %+v next %v", v, next)
	}
	c.add(2 * time.Second)
	v, next = s.Verdicts()
	if len(v) != 1 || v[0].ID != good || v[0].Health != event.HealthHealthy || !next.Equal(c.Now().Add(3*time.Second)) {
		t.Fatalf("after one interval: %+v next %v", v, next)
	}
	c.add(3 * time.Second)
	v, _ = s.Verdicts()
	if len(v) != 2 || v[1].ID != bad || v[1].Health != event.HealthUnhealthy {
		t.Fatalf("after start period + retries × interval: %+v", v)
	}
	if st, _ := s.Inspect(ctx, bad); st.Health != event.HealthUnhealthy {
		t.Fatalf("inspect: %+v", st)
	}
	// The stream starts with the current verdicts.
	ch, _ := s.Health(ctx)
	got := map[string]event.Health{}
	for len(got) < 2 {
		select {
		case h := <-ch:
			got[h.ID] = h.Health
		case <-time.After(10 * time.Second):
			t.Fatalf("health stream gave %v", got)
		}
	}
	if got[good] != event.HealthHealthy || got[bad] != event.HealthUnhealthy {
		t.Fatalf("health stream: %v", got)
	}
}

func TestSimLogsAreMultiplexedLikeDockers(t *testing.T) {
	s, _ := newTestRuntime(t)
	ctx := context.Background()
	id := runSpec(t, s, "task/a", event.ContainerSpec{Command: []string{"exit", "3"}})
	rc, err := s.Logs(ctx, id, runtime.LogOptions{Tail: -1})
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &errOut, rc); err != nil {
		t.Fatal(err)
	}
	if out.String() != "testbox: [exit 3]\n" || errOut.String() != "exited 3\n" {
		t.Fatalf("stdout %q stderr %q", out.String(), errOut.String())
	}
	rc, _ = s.Logs(ctx, id, runtime.LogOptions{Tail: 1})
	out.Reset()
	errOut.Reset()
	_, _ = stdcopy.StdCopy(&out, &errOut, rc)
	if out.Len() != 0 || errOut.String() != "exited 3\n" {
		t.Fatalf("tail 1: stdout %q stderr %q", out.String(), errOut.String())
	}
}
