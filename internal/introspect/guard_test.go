package introspect_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/forensics"
	"github.com/agentd/agentd/internal/introspect"
)

func serve(t *testing.T, api *introspect.API, h http.Handler) (net.Listener, *http.Server) {
	t.Helper()
	ln, err := api.Listen()
	if err != nil {
		t.Fatal(err)
	}
	srv := api.Server(h)
	if srv.ReadTimeout == 0 || srv.WriteTimeout == 0 || srv.IdleTimeout == 0 || srv.ReadHeaderTimeout == 0 {
		t.Fatalf("server without read, write or idle timeouts: %+v", srv)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln, srv
}

// ownClient is a client of the agent's own (forensics.APIClient: every request carries the
// Agentd-Client header) with a bound on each request.
func ownClient(timeout time.Duration) *http.Client {
	c, _ := forensics.APIClient("")
	c.Timeout = timeout
	return c
}

// status GETs url as the agent's own clients do (the Agentd-Client header, which root's
// loopback connection needs to read more than the open pages), with the token if given.
func status(t *testing.T, c *http.Client, url, token string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set(forensics.ClientHeader, "1")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })

// TestNonLoopbackListenNeedsAToken: 0.0.0.0 without a token file is refused naming both ways
// out; with one, a request without the token (or with a wrong one) gets 401.
func TestNonLoopbackListenNeedsAToken(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", "[::]:0", ":0", "192.0.2.1:0", "agent.example:0"} {
		_, err := introspect.Guard(introspect.Options{Listen: addr})
		if err == nil || !strings.Contains(err.Error(), "--api-token-file") || !strings.Contains(err.Error(), "unix:") {
			t.Errorf("Guard(%q) = %v; want a refusal naming --api-token-file and a unix socket", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:0", "localhost:0", "[::1]:0", "127.0.0.2:0"} {
		if _, err := introspect.Guard(introspect.Options{Listen: addr}); err != nil {
			t.Errorf("Guard(%q): %v", addr, err)
		}
	}
	tok := filepath.Join(t.TempDir(), "api-token")
	os.WriteFile(tok, []byte("the-api-token\n"), 0o600)
	api, err := introspect.Guard(introspect.Options{Listen: "0.0.0.0:0", TokenFile: tok})
	if err != nil {
		t.Fatal(err)
	}
	ln, _ := serve(t, api, ok)
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/tasks", ln.Addr().(*net.TCPAddr).Port)
	c := &http.Client{Timeout: 5 * time.Second}
	for _, bad := range []string{"", "wrong", "the-api-token-and-more", "the-api-toke"} {
		if code := status(t, c, url, bad); code != http.StatusUnauthorized {
			t.Errorf("token %q: HTTP %d, want 401", bad, code)
		}
	}
	if code := status(t, c, url, "the-api-token"); code != http.StatusOK {
		t.Errorf("right token: HTTP %d", code)
	}
	empty := filepath.Join(t.TempDir(), "empty")
	os.WriteFile(empty, nil, 0o600)
	if _, err := introspect.Guard(introspect.Options{Listen: "0.0.0.0:0", TokenFile: empty}); err == nil {
		t.Error("an empty token file was accepted")
	}
}

func TestUnixSocketListen(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "api.sock")
	api, err := introspect.Guard(introspect.Options{Listen: "unix:" + sock})
	if err != nil {
		t.Fatal(err)
	}
	serve(t, api, ok)
	st, err := os.Stat(sock)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode: %v %v, want 0600", st.Mode(), err)
	}
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	if code := status(t, c, "http://agentd/v1/tasks", ""); code != http.StatusOK {
		t.Fatalf("over the unix socket: HTTP %d", code)
	}
	// A regular file in the way is not replaced.
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, []byte("precious"), 0o600)
	api2, _ := introspect.Guard(introspect.Options{Listen: "unix:" + file})
	if _, err := api2.Listen(); err == nil {
		t.Fatal("a regular file at the socket path was replaced")
	}
}

// TestLongPollsAreBounded: past the bound, a long poll is answered 503 at once instead of
// holding one more connection and goroutine for a minute.
func TestLongPollsAreBounded(t *testing.T) {
	release := make(chan struct{})
	var entered sync.WaitGroup
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered.Done()
		<-release
	})
	api, _ := introspect.Guard(introspect.Options{Listen: "127.0.0.1:0"})
	ln, _ := serve(t, api, h)
	url := fmt.Sprintf("http://%s/v1/journal/records?from=1&wait=60", ln.Addr())
	c := ownClient(10 * time.Second)
	const bound = 8
	entered.Add(bound)
	done := make(chan int, bound)
	for i := 0; i < bound; i++ {
		go func() {
			resp, err := c.Get(url)
			if err == nil {
				resp.Body.Close()
				done <- resp.StatusCode
				return
			}
			done <- 0
		}()
	}
	waitAll(t, &entered, "all eight long polls inside the handler") // bounded: a refused poll never enters
	if code := status(t, c, url, ""); code != http.StatusServiceUnavailable {
		t.Fatalf("long poll past the bound: HTTP %d, want 503", code)
	}
	close(release)
	for i := 0; i < bound; i++ {
		if code := <-done; code != http.StatusOK {
			t.Fatalf("a long poll within the bound: HTTP %d", code)
		}
	}
}

// TestAPITokenFileGetsTheSealKeysChecks: the API token is what lets a local user read logs and
// the journal, so its file is read as the seal key is (datadir.ReadPrivate). Before, a 0644
// token file handed every local user the whole API without a word, a FIFO in its place hung
// the start, and a link was followed to whatever file it named.
func TestAPITokenFileGetsTheSealKeysChecks(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "token")
	must(t, os.WriteFile(good, []byte("the-api-token\n"), 0o600))
	open := filepath.Join(dir, "open")
	must(t, os.WriteFile(open, []byte("the-api-token\n"), 0o644))
	link := filepath.Join(dir, "link")
	must(t, os.Symlink(good, link))
	fifo := filepath.Join(dir, "fifo")
	must(t, syscall.Mkfifo(fifo, 0o600))
	for path, want := range map[string]string{open: "mode 0644", link: "symbolic link", fifo: "named pipe", dir: "directory"} {
		done := make(chan error, 1)
		go func() {
			_, err := introspect.Guard(introspect.Options{Listen: "0.0.0.0:0", TokenFile: path})
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "--api-token-file") || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), want) {
				t.Errorf("--api-token-file %s: %v; want refused naming the flag, the file and %q", path, err, want)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("--api-token-file %s: the start hangs", path)
		}
	}
	if _, err := introspect.Guard(introspect.Options{Listen: "0.0.0.0:0", TokenFile: good}); err != nil {
		t.Errorf("a 0600 token file of the agent's: %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
