package docker

import (
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/bindroot"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/protocol"
	"github.com/agentd/agentd/internal/runtime"
)

// The Docker runtime's side of the bind boundary (internal/bindroot): its volumes' reserved
// names, the local engine it needs, and where that engine's socket lies.

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// The agent's bind volumes are reserved in the task rules and in the runtime alike.
func TestBindVolumePrefixIsReservedForTheAgent(t *testing.T) {
	if BindVolumePrefix != protocol.ReservedVolumePrefix {
		t.Fatalf("docker %q, protocol %q: the rules must reserve what the runtime makes", BindVolumePrefix, protocol.ReservedVolumePrefix)
	}
	spec := runtime.CreateSpec{Task: "t", Container: event.ContainerSpec{Name: "a", Image: "i",
		Mounts: []event.Mount{{Type: event.MountVolume, Source: BindVolumePrefix + "00", Target: "/x"}}}}
	if _, _, err := containerConfig(spec, nil, nil); err == nil || !strings.Contains(err.Error(), "agent's own") {
		t.Fatalf("a task volume named as the agent's bind volumes: %v; want refused", err)
	}
	spec.Container.Mounts[0] = event.Mount{Type: event.MountBind, Source: "/srv/x", Target: "/x"}
	if _, _, err := containerConfig(spec, nil, nil); err == nil {
		t.Fatal("a bind mount without its opened source reached the engine's request")
	}
	_, hc, err := containerConfig(spec, nil, map[int]string{0: BindVolumePrefix + "01"})
	if err != nil {
		t.Fatal(err)
	}
	if m := hc.Mounts[0]; m.Type != "volume" || m.Source != BindVolumePrefix+"01" || m.VolumeOptions == nil || !m.VolumeOptions.NoCopy {
		t.Fatalf("bind mount reaches the engine as %+v; want its volume, no copy", m)
	}
}

// A remote engine would read /proc/<pid>/fd/<n> on its own host: bind roots need the local
// engine's unix socket.
func TestBindRootsNeedTheLocalEngine(t *testing.T) {
	roots, err := bindroot.Open([]string{t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer roots.Close()
	e, _ := NewEngine(t.Context(), "tcp://127.0.0.1:1", "agent-remote", PullConfig{})
	if e == nil {
		t.Fatal("no engine for an address that does not answer")
	}
	defer e.Close()
	if err := e.SetBindRoots(roots); err == nil || !strings.Contains(err.Error(), "--allow-bind-root") || !strings.Contains(err.Error(), "tcp://127.0.0.1:1") {
		t.Fatalf("bind roots on an engine over tcp: %v; want refused naming the flag and the address", err)
	}
	if err := e.SetBindRoots(nil); err != nil {
		t.Fatalf("no bind roots: %v", err)
	}
}

// The engine's socket is found where NewEngine finds it — --docker-host, else DOCKER_HOST,
// else the default — so run.go can refuse a bind root holding it; tcp has no path.
func TestTheEnginesSocketPath(t *testing.T) {
	t.Setenv("DOCKER_HOST", "")
	for host, want := range map[string]string{
		"":                       "/var/run/docker.sock",
		"unix:///srv/run/d.sock": "/srv/run/d.sock",
		"tcp://127.0.0.1:2375":   "",
	} {
		if got, err := SocketPath(host); err != nil || got != want {
			t.Errorf("SocketPath(%q) = %q, %v; want %q", host, got, err, want)
		}
	}
	t.Setenv("DOCKER_HOST", "unix:///srv/env/d.sock")
	if got, err := SocketPath(""); err != nil || got != "/srv/env/d.sock" {
		t.Errorf("DOCKER_HOST unix:///srv/env/d.sock: %q, %v; want its path", got, err)
	}
	if _, err := SocketPath("no-scheme"); err == nil || !strings.Contains(err.Error(), "--docker-host") {
		t.Errorf("a bad host: %v; want an error naming --docker-host", err)
	}
}
