package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/introspect"
)

// TestDockerPullCannotBorrowRootsTrust: a registry answers the Docker Engine's pull with 401
// and a token realm naming the agent's loopback API; dockerd (root) GETs it. Root's socket
// alone must not open the API — the request carries no Agentd-Client — so the journal never
// leaves through the pull error, which reaches whoever named the image (the control plane),
// nor as the bearer token the engine then hands the registry.
func TestDockerPullCannotBorrowRootsTrust(t *testing.T) {
	if os.Getenv("AGENTD_DOCKER_TESTS") != "1" {
		t.Skip("Docker Engine tests: run with make test-docker")
	}
	const secret = "JOURNAL-EXPORT-7f3a-secret"
	var served, conns atomic.Int64
	api, err := introspect.Guard(introspect.Options{Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := api.Listen()
	if err != nil {
		t.Fatal(err)
	}
	srv := api.Server(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1) // past the access rules: as the export would be
		fmt.Fprintf(w, `{"token": %q, "journal": %q}`, secret, secret)
	}))
	srv.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	var asked, leaked atomic.Int64
	realm := "http://" + ln.Addr().String() + "/v1/journal/export"
	registry := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		if strings.Contains(r.Header.Get("Authorization"), secret) {
			leaked.Add(1) // the engine hands the realm's "token" to the registry
		}
		w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm=%q,service="registry",scope="repository:deputy/x:pull"`, realm))
		w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
		w.WriteHeader(http.StatusUnauthorized)
	}))
	t.Cleanup(registry.Close)
	ref := strings.TrimPrefix(registry.URL, "http://") + "/deputy/x:y"
	t.Cleanup(func() { _ = exec.Command("docker", "image", "rm", "-f", ref).Run() })

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", "pull", ref).CombinedOutput()
	if err == nil {
		t.Fatalf("docker pull %s succeeded from a registry that only answers 401:\n%s", ref, out)
	}
	t.Logf("docker pull: %v: %s", err, out)
	if asked.Load() == 0 || conns.Load() == 0 {
		t.Fatalf("the engine never asked the registry (%d) or never followed its realm to the API (%d connections): nothing was tried\n%s", asked.Load(), conns.Load(), out)
	}
	if n := served.Load(); n != 0 {
		t.Errorf("the engine's fetch of the realm got past the access rules %d times: root's trust was lent", n)
	}
	if n := leaked.Load(); n != 0 {
		t.Errorf("the registry received the API's answer as a bearer token %d times", n)
	}
	if strings.Contains(string(out), secret) {
		t.Errorf("the pull error carries what the API answered:\n%s", out)
	}
}
