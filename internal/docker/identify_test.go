package docker

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/bindroot"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/runtime"
)

// A fake engine on a unix socket: its /_ping names it as ping does (docker, podman, or nothing),
// its /version as version does once release is closed; its event stream stays open until the
// server closes.
type fakeEngine struct {
	ping, version string
	release       chan struct{}
}

func (f fakeEngine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/_ping":
		w.Header().Set("Api-Version", "1.41")
		switch f.ping {
		case "docker":
			w.Header().Set("Server", "Docker/20.10.24 (linux)")
		case "podman":
			w.Header().Set("Libpod-Api-Version", "4.3.1")
		}
		_, _ = w.Write([]byte("OK"))
	case strings.HasSuffix(r.URL.Path, "/version"):
		select {
		case <-f.release:
		case <-r.Context().Done():
			return
		}
		name := map[string]string{"docker": "Engine", "podman": "Podman Engine"}[f.version]
		_ = json.NewEncoder(w).Encode(map[string]any{"Components": []map[string]string{{"Name": name}}})
	case strings.HasSuffix(r.URL.Path, "/events"):
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	default:
		http.Error(w, `{"message":"not in the fake"}`, http.StatusNotImplemented)
	}
}

// serve serves f at sock (through a socket made beside it and renamed over it, so a socket
// already there is replaced at once); closing the server leaves the path alone.
func (f fakeEngine) serve(t *testing.T, sock string) *http.Server {
	t.Helper()
	l, err := net.Listen("unix", sock+".new")
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	must(t, os.Rename(sock+".new", sock))
	srv := &http.Server{Handler: f}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close() })
	return srv
}

func fakeEngineAt(t *testing.T, f fakeEngine) (*Engine, string, *http.Server, error) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "engine.sock")
	srv := f.serve(t, sock)
	e, err := NewEngine(context.Background(), "unix://"+sock, "agent-1", PullConfig{})
	if e == nil {
		t.Fatalf("no engine: %v", err)
	}
	t.Cleanup(func() { e.Close() })
	return e, sock, srv, err
}

// An engine that does not say which it is within the bound is never taken for Docker: the
// agent asks again, with backoff, and meanwhile refuses what depends on the answer, naming
// the address. One that names itself neither stays unnamed too.
func TestAnEngineThatDoesNotSayWhichItIsIsNeverTakenForDocker(t *testing.T) {
	defer func(d time.Duration) { identifyWait = d }(identifyWait)
	identifyWait = 200 * time.Millisecond
	for _, version := range []string{"podman", "docker", "neither"} {
		t.Run(version, func(t *testing.T) {
			release := make(chan struct{})
			e, sock, _, err := fakeEngineAt(t, fakeEngine{version: version, release: release})
			if !errors.Is(err, runtime.ErrUnavailable) || !strings.Contains(err.Error(), sock) {
				t.Fatalf("an engine whose /version does not answer: %v; want unavailable, naming %s", err, sock)
			}
			ctx := context.Background()
			_, cerr := e.Create(ctx, runtime.CreateSpec{Task: "task/a", Container: event.ContainerSpec{Name: "app", Image: "img"}})
			_, xerr := e.Exits(ctx, 0)
			_, herr := e.Health(ctx)
			for _, err := range []error{cerr, e.Start(ctx, "c1"), xerr, herr} {
				if !errors.Is(err, runtime.ErrUnavailable) || !strings.Contains(err.Error(), "not named yet") || !strings.Contains(err.Error(), sock) {
					t.Fatalf("a call before the engine is named: %v; want unavailable, saying so and naming %s", err, sock)
				}
			}
			close(release) // /version answers now
			err = awaitIdentity(e, 10*time.Second, func(err error) bool {
				return err == nil || strings.Contains(err.Error(), "neither Docker nor Podman")
			})
			kind, _ := e.kindNow()
			want := map[string]engineKind{"podman": kindPodman, "docker": kindDocker, "neither": kindUnknown}[version]
			if kind != want {
				t.Fatalf("named %v (%v) once /version answered with %s; want %v", kind, err, version, want)
			}
			if want == kindUnknown && (err == nil || !strings.Contains(err.Error(), "neither Docker nor Podman")) {
				t.Fatalf("an engine naming itself neither: %v; want unnamed, saying so", err)
			}
		})
	}
}

// The engine is named again after it was lost, so a Docker socket that Podman serves by now
// is Podman's: bind roots, allowed on Docker, are refused. Lost either way: down for a while
// (a call could not connect), or replaced at once (no call failed; its event stream broke).
func TestAReplacedEngineIsNamedAgain(t *testing.T) {
	for _, atOnce := range []bool{false, true} {
		t.Run(map[bool]string{false: "down, then Podman", true: "replaced at once"}[atOnce], func(t *testing.T) {
			e, sock, docker, err := fakeEngineAt(t, fakeEngine{ping: "docker"})
			if kind, _ := e.kindNow(); err != nil || kind != kindDocker {
				t.Fatalf("a Docker engine: named %v (%v); want Docker", kind, err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if atOnce {
				exits, err := e.Exits(ctx, 0)
				if err != nil {
					t.Fatal(err)
				}
				fakeEngine{ping: "podman"}.serve(t, sock) // the socket replaced
				docker.Close()                            // the old engine gone: its stream ends
				select {
				case <-exits:
				case <-time.After(10 * time.Second):
					t.Fatal("the exit stream of the replaced engine did not end")
				}
			} else {
				docker.Close()
				must(t, os.Remove(sock))
				if _, err := e.List(ctx); !errors.Is(err, runtime.ErrUnavailable) {
					t.Fatalf("list with no engine: %v; want unavailable", err)
				}
				if _, err := e.knownKind(); !errors.Is(err, runtime.ErrUnavailable) || !strings.Contains(err.Error(), sock) {
					t.Fatalf("an engine that could not be reached: %v; want it unnamed, naming %s", err, sock)
				}
				fakeEngine{ping: "podman"}.serve(t, sock)
			}
			if err := awaitNamed(e, 10*time.Second); err != nil {
				t.Fatal(err)
			}
			if !onPodman(e) {
				t.Fatal("the engine that replaced Docker's was not named Podman")
			}
			roots, err := bindroot.Open([]string{t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			defer roots.Close()
			if err := e.SetBindRoots(roots); err == nil || !strings.Contains(err.Error(), "not on Podman") {
				t.Fatalf("bind roots on the Podman that replaced Docker: %v; want refused, naming Podman", err)
			}
		})
	}
}
