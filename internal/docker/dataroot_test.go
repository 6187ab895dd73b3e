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
	"sync/atomic"
	"testing"

	"github.com/moby/moby/client"

	"github.com/agentd/agentd/internal/bindroot"
)

// infoEngine serves /info, naming dataRoot as the engine's root directory, on a unix socket
// of this process (so the socket's peer is in this pid and mount namespace).
func infoEngine(t *testing.T, dataRoot string) *Engine {
	t.Helper()
	e, _ := countedInfoEngine(t, dataRoot)
	return e
}

// countedInfoEngine is infoEngine, with the number of /info calls it has answered.
func countedInfoEngine(t *testing.T, dataRoot string) (*Engine, *atomic.Int32) {
	t.Helper()
	var infos atomic.Int32
	sock := filepath.Join(t.TempDir(), "docker.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/info") {
			http.Error(w, `{"message":"unexpected call"}`, http.StatusNotImplemented)
			return
		}
		infos.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"DockerRootDir": dataRoot})
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	cli, err := client.New(client.WithHost("unix://"+sock), client.WithAPIVersion("1.41"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return &Engine{cli: cli, agent: "agent-1", host: "unix://" + sock, bindVols: map[string]*os.File{}, bindLetGo: map[string]struct{}{}, ident: identity{kind: kindDocker}}, &infos
}

// TestTheDataRootIsAskedOncePerNamingOfTheEngine: Podman's /info takes seconds (1.6 to 3.4 s
// seen), and the image collector asks for the disk every cycle; the engine's data root is
// asked once while the engine stays named, and again once it was lost (another engine may
// serve the socket by then).
func TestTheDataRootIsAskedOncePerNamingOfTheEngine(t *testing.T) {
	e, infos := countedInfoEngine(t, t.TempDir())
	ctx := context.Background()
	for range 3 {
		if _, total, err := e.ImageDiskFree(ctx); err != nil || total == 0 {
			t.Fatalf("disk of the data root: total %d, %v", total, err)
		}
	}
	if n := infos.Load(); n != 1 {
		t.Fatalf("/info asked %d times for three disk reads while named; want once", n)
	}
	e.lost(errors.New("the test lost it"))
	e.ident.kind = kindDocker // named again (identify, without its /_ping)
	if _, _, err := e.ImageDiskFree(ctx); err != nil {
		t.Fatal(err)
	}
	if n := infos.Load(); n != 2 {
		t.Fatalf("/info asked %d times in all after the engine was lost and named again; want twice", n)
	}
}

// TestABindRootHoldingTheEnginesDataRootIsRefused: a task binding the engine's data root —
// other containers' configurations, every volume, every image layer — is root on the host
// as much as one binding its socket, so a root holding it is refused, naming both; a data
// root elsewhere is no matter.
func TestABindRootHoldingTheEnginesDataRootIsRefused(t *testing.T) {
	base := t.TempDir()
	root, outside := filepath.Join(base, "root"), filepath.Join(base, "outside")
	must(t, os.MkdirAll(filepath.Join(root, "inside"), 0o755))
	must(t, os.MkdirAll(outside, 0o755))
	roots, err := bindroot.Open([]string{root})
	if err != nil {
		t.Fatal(err)
	}
	defer roots.Close()
	inside := filepath.Join(root, "inside")
	err = infoEngine(t, inside).SetBindRoots(roots)
	if err == nil || !strings.Contains(err.Error(), "data root "+inside) || !strings.Contains(err.Error(), root) {
		t.Errorf("the engine's data root %s beneath the root: %v; want refused naming both", inside, err)
	}
	if err := infoEngine(t, outside).SetBindRoots(roots); err != nil {
		t.Errorf("the engine's data root %s outside every root: %v; want the roots taken", outside, err)
	}
}
