package docker

import (
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/moby/client"

	"github.com/agentd/agentd/internal/bindroot"
)

// infoEngine serves /info, naming dataRoot as the engine's root directory, on a unix socket
// of this process (so the socket's peer is in this pid and mount namespace).
func infoEngine(t *testing.T, dataRoot string) *Engine {
	t.Helper()
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
	return &Engine{cli: cli, agent: "agent-1", host: "unix://" + sock, bindVols: map[string]*os.File{}, bindLetGo: map[string]struct{}{}, ident: identity{kind: kindDocker}}
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
