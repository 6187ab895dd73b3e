package introspect_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/forensics"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/introspect"
	"github.com/agentd/agentd/internal/simruntime"
)

// rawGet sends one request with exactly the Host header given (none at all for HTTP/1.0 when
// host is "-"), as a rebinding page's browser or any client could (with Agentd-Client, so root
// may read: only the Host is in question), and returns the status.
func rawGet(t *testing.T, addr, host, path string) (int, string) {
	t.Helper()
	req := fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\nAgentd-Client: 1\r\nConnection: close\r\n\r\n", path, host)
	if host == "-" {
		req = fmt.Sprintf("GET %s HTTP/1.0\r\n\r\n", path)
	}
	code, h, body := rawRequest(t, addr, req)
	if h.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("Host %q: HTTP %d without X-Content-Type-Options: nosniff", host, code)
	}
	return code, body
}

// rawRequest writes req, byte for byte, on a new loopback connection of this test's user and
// returns the answer's status, headers and body.
func rawRequest(t *testing.T, addr, req string) (int, http.Header, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(15 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%.60q: %v", req, err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, _ = bufio.NewReader(resp.Body).WriteTo(&b)
	return resp.StatusCode, resp.Header, b.String()
}

// TestForeignHostsAreMisdirected: a page whose name re-resolves to 127.0.0.1 (DNS rebinding)
// sends its own name as Host; the API answers 421 naming it, and answers only IP literals,
// localhost and the --api-host names, on any port.
func TestForeignHostsAreMisdirected(t *testing.T) {
	t.Parallel()
	api, err := introspect.Guard(introspect.Options{Listen: "127.0.0.1:0", Hosts: []string{"Agent.Internal"}})
	if err != nil {
		t.Fatal(err)
	}
	ln, _ := serve(t, api, ok)
	addr := ln.Addr().String()
	for _, c := range []struct {
		host string
		want int
	}{
		{"attacker.example", 421},
		{"attacker.example:51678", 421},
		{"127.0.0.1.nip.io", 421},
		{"localhost.", 421},
		{"", 421},
		{"-", 421}, // HTTP/1.0, no Host at all
		{"agent.internal.attacker.example", 421},
		{"localhost", 200},
		{"localhost:51678", 200},
		{"127.0.0.1:51678", 200},
		{"[::1]:1", 200},
		{"[::1]", 200},
		{"agent.internal", 200},
		{"AGENT.internal:8080", 200},
	} {
		code, body := rawGet(t, addr, c.host, "/v1/tasks")
		if code != c.want {
			t.Errorf("Host %q: HTTP %d; want %d (%s)", c.host, code, c.want, body)
		}
		var answer struct{ Error string }
		if code == 421 && (json.Unmarshal([]byte(body), &answer) != nil || c.host != "-" && !strings.Contains(answer.Error, strconv.Quote(c.host))) {
			t.Errorf("Host %q: the 421 does not name the host: %s", c.host, body)
		}
	}
	if _, err := introspect.Guard(introspect.Options{Listen: "127.0.0.1:0", Hosts: []string{"http://agent.internal"}}); err == nil || !strings.Contains(err.Error(), "--api-host") {
		t.Errorf("an --api-host with a scheme: %v; want a refusal naming --api-host", err)
	}
	// A unix socket takes any Host: no browser reaches it.
	sock := filepath.Join(t.TempDir(), "api.sock")
	uapi, _ := introspect.Guard(introspect.Options{Listen: "unix:" + sock})
	serve(t, uapi, ok)
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	if code := status(t, c, "http://attacker.example/v1/tasks", ""); code != 200 {
		t.Errorf("unix socket, Host attacker.example: HTTP %d; want 200", code)
	}
}

// secretTask is the task whose history and output no local user may read.
const secretTask = "task/secret-arn-7f3a"

// liveAPI serves a real engine over a real journal on the simulated runtime through
// api.Server on a real listener: secretTask's container ran and exited, its log says
// "exited 3".
func liveAPI(t *testing.T, o introspect.Options) net.Listener {
	t.Helper()
	spec := []event.ContainerSpec{{Name: "app", Image: "web", Command: []string{"exit", "3"}, Essential: true}}
	j, dir := journalWith(t, event.Record{Time: time.Now(), Task: secretTask, Event: &event.TaskAdded{Desired: event.StatusRunning, Containers: spec}})
	rt, _ := simruntime.Open(dir, "agent-1", nil)
	e := engine.New(engine.Config{AgentID: "agent-1", CleanupWait: time.Hour}, j, rt, nil, nil, nil, zerolog.Nop())
	e.RegisterStateCollector()
	h := introspect.Handler(e, introspect.Info{Version: "test", DataDir: dir, Runtime: "sim", Logs: rt}, fsm.Config{CleanupWait: time.Hour})
	running(t, e)
	deadline := time.Now().Add(20 * time.Second)
	for {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/v1/tasks/"+secretTask+"/containers/app/logs", nil))
		if w.Code == 200 && strings.Contains(w.Body.String(), "exited 3") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the container never ran: HTTP %d %s", w.Code, w.Body.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	api, err := introspect.Guard(o)
	if err != nil {
		t.Fatal(err)
	}
	ln, _ := serve(t, api, h)
	return ln
}

// needSetpriv skips unless this test runs as root and setpriv can switch to uid 65534 here.
func needSetpriv(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs clients as uid 65534 with setpriv")
	}
	if out, err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/bin/true").CombinedOutput(); err != nil {
		t.Skipf("setpriv cannot switch to uid 65534 here: %v %s", err, out)
	}
}

// asUser runs curl as another user (setpriv: uid, gid, no supplementary groups) and returns
// the HTTP status (0: no connection) and the body. Skips unless the test runs as root with
// setpriv and curl at hand.
func asUser(t *testing.T, uid, gid int, args ...string) (int, string) {
	t.Helper()
	needSetpriv(t)
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("needs curl on PATH")
	}
	cmd := exec.Command("setpriv", append([]string{fmt.Sprintf("--reuid=%d", uid), fmt.Sprintf("--regid=%d", gid), "--clear-groups",
		"curl", "-sS", "--max-time", "20", "-o", "-", "-w", "\n%{http_code}"}, args...)...)
	out, _ := cmd.CombinedOutput() // curl fails (exit 7) when it cannot connect: status 0
	s := strings.TrimRight(string(out), "\n")
	i := strings.LastIndexByte(s, '\n')
	code, _ := strconv.Atoi(s[i+1:])
	return code, s[:max(i, 0)]
}

// TestLocalUserReadsOnlyTheOpenPages: uid 65534 on the agent's host reaches the loopback API
// but reads no task, reason, log, record or journal; the status page shows it counts only and
// /metrics no task. Root (this test) reads everything, as do callers with the token.
func TestLocalUserReadsOnlyTheOpenPages(t *testing.T) {
	t.Parallel()
	tok := filepath.Join(t.TempDir(), "api-token")
	if err := os.WriteFile(tok, []byte("the-api-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ln := liveAPI(t, introspect.Options{Listen: "127.0.0.1:0", TokenFile: tok})
	base := "http://" + ln.Addr().String()
	logs := "/v1/tasks/" + secretTask + "/containers/app/logs"
	for _, path := range []string{logs, logs + "?follow=1", "/v1/journal/export", "/v1/journal/records?from=1", "/v1/journal/records?from=1&wait=1",
		"/v1/tasks", "/v1/tasks/" + secretTask, "/status/timeline.svg?task=" + secretTask, "/signin", "//v1/tasks", "/./v1/tasks"} {
		code, body := asUser(t, 65534, 65534, base+path)
		if code != 401 {
			t.Errorf("uid 65534 GET %s: HTTP %d; want 401\n%.300s", path, code, body)
		}
		if strings.Contains(body, "exited 3") || strings.Contains(body, secretTask) {
			t.Errorf("uid 65534 GET %s: the answer carries the task's output or name: %.300s", path, body)
		}
	}
	for _, path := range []string{"/", "/?part=main", "/metrics", "/healthz", "/v1/metadata", "/status.js"} {
		code, body := asUser(t, 65534, 65534, base+path)
		if code != 200 {
			t.Errorf("uid 65534 GET %s: HTTP %d; want 200 (an open page)\n%.300s", path, code, body)
		}
		for _, secret := range []string{secretTask, "exited 3", "the-api-token"} {
			if strings.Contains(body, secret) {
				t.Errorf("uid 65534 GET %s carries %q", path, secret)
			}
		}
	}
	if code, page := asUser(t, 65534, 65534, base+"/"); !strings.Contains(page, `id="count-STOPPED" data-value="1"`) || !strings.Contains(page, `id="tasks-limited"`) {
		t.Errorf("uid 65534: the status page (HTTP %d) shows no counts or does not say tasks need credentials:\n%s", code, page)
	}
	// The token opens everything to the same user: as a Bearer token, and as Basic's password
	// (what a browser sends after /signin).
	if code, body := asUser(t, 65534, 65534, "-H", "Authorization: Bearer the-api-token", base+logs); code != 200 || !strings.Contains(body, "exited 3") {
		t.Errorf("uid 65534 with the token: logs HTTP %d %q", code, body)
	}
	if code, body := asUser(t, 65534, 65534, "-u", "me:the-api-token", base+"/"); code != 200 || !strings.Contains(body, secretTask) {
		t.Errorf("uid 65534 with the token as Basic's password: the page (HTTP %d) lacks the task", code)
	}
	if code, _ := asUser(t, 65534, 65534, "-H", "Authorization: Bearer wrong", base+"/"); code != 401 {
		t.Errorf("uid 65534 with a wrong token: HTTP %d on an open page; want 401", code)
	}
	// Root, on the same listener, without a token: everything (local root tools need none).
	if body := fetchBody(t, base+logs); !strings.Contains(body, "exited 3") {
		t.Errorf("root: logs %q", body)
	}
	if body := fetchBody(t, base+"/"); !strings.Contains(body, secretTask) {
		t.Error("root: the status page lacks the task")
	}
}

func fetchBody(t *testing.T, u string) string {
	t.Helper()
	c, _ := forensics.APIClient("")
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, _ = bufio.NewReader(resp.Body).WriteTo(&b)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: HTTP %d %s", u, resp.StatusCode, b.String())
	}
	return b.String()
}

// TestUnixSocketModeDecidesWhoConnects: the socket is 0600 (only root connects); with
// --api-group it is 0660 and the group's: its members connect and read everything, others
// still cannot connect.
func TestUnixSocketModeDecidesWhoConnects(t *testing.T) {
	// A directory anyone may enter (t.TempDir's parent is 0700): the socket's mode decides.
	dir, err := os.MkdirTemp("", "agentd-socket-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "api.sock")
	ln := liveAPI(t, introspect.Options{Listen: "unix:" + sock})
	if code, body := asUser(t, 65534, 65534, "--unix-socket", sock, "http://agentd/v1/tasks"); code != 0 {
		t.Errorf("uid 65534 on the 0600 socket: HTTP %d; want no connection\n%s", code, body)
	}
	ln.Close()

	gsock := filepath.Join(dir, "group.sock")
	liveAPI(t, introspect.Options{Listen: "unix:" + gsock, Group: "nogroup"})
	st, err := os.Stat(gsock)
	if err != nil || st.Mode().Perm() != 0o660 {
		t.Fatalf("socket with --api-group: %v %v; want 0660", st.Mode(), err)
	}
	logs := "http://agentd/v1/tasks/" + secretTask + "/containers/app/logs"
	if code, body := asUser(t, 65534, 65534, "--unix-socket", gsock, logs); code != 200 || !strings.Contains(body, "exited 3") {
		t.Errorf("a member of --api-group on the 0660 socket: HTTP %d %q; want the logs", code, body)
	}
	if code, _ := asUser(t, 65534, 65533, "--unix-socket", gsock, logs); code != 0 {
		t.Errorf("a user outside --api-group on the 0660 socket: HTTP %d; want no connection", code)
	}
	if _, err := introspect.Guard(introspect.Options{Listen: "127.0.0.1:0", Group: "nogroup"}); err == nil || !strings.Contains(err.Error(), "--api-group") {
		t.Errorf("--api-group on TCP: %v; want a refusal naming --api-group", err)
	}
	if _, err := introspect.Guard(introspect.Options{Listen: "unix:" + gsock, Group: "no-such-group-agentd"}); err == nil || !strings.Contains(err.Error(), "no-such-group-agentd") {
		t.Errorf("an unknown --api-group: %v", err)
	}
}

// TestLiveSocketIsRefusedNeverDeleted: a socket another process answers on stays, and the
// agent refuses to start naming it; a stale one is replaced; a link to a socket is refused.
func TestLiveSocketIsRefusedNeverDeleted(t *testing.T) {
	dir := t.TempDir()
	live := filepath.Join(dir, "live.sock")
	other, err := net.Listen("unix", live)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	api, _ := introspect.Guard(introspect.Options{Listen: "unix:" + live})
	if _, err := api.Listen(); err == nil || !strings.Contains(err.Error(), live) || !strings.Contains(err.Error(), "live process") {
		t.Fatalf("a live socket: %v; want a refusal naming the path and the live process", err)
	}
	go func() {
		if c, err := other.Accept(); err == nil {
			c.Close()
		}
	}()
	c, err := net.DialTimeout("unix", live, 5*time.Second)
	if err != nil {
		t.Fatalf("the other process's socket no longer answers: %v", err)
	}
	c.Close()

	stale := filepath.Join(dir, "stale.sock")
	dead, _ := net.Listen("unix", stale)
	dead.(*net.UnixListener).SetUnlinkOnClose(false)
	dead.Close()
	sapi, _ := introspect.Guard(introspect.Options{Listen: "unix:" + stale})
	ln, err := sapi.Listen()
	if err != nil {
		t.Fatalf("a stale socket: %v; want it replaced", err)
	}
	ln.Close()

	link := filepath.Join(dir, "link.sock")
	os.Symlink(live, link)
	lapi, _ := introspect.Guard(introspect.Options{Listen: "unix:" + link})
	if _, err := lapi.Listen(); err == nil {
		t.Fatal("a link to a socket was replaced")
	}
	if _, err := os.Lstat(link); err != nil {
		t.Fatalf("the link is gone: %v", err)
	}
}

// TestClosedClientSocketIsNotTrusted: a socket its process has closed is listed by the kernel
// as uid 0; uid 65534 sending requests and closing at once must not pass for root (before the
// check, 82 of 100 such requests reached the handler).
func TestClosedClientSocketIsNotTrusted(t *testing.T) {
	var reached atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached.Add(1) })
	api, _ := introspect.Guard(introspect.Options{Listen: "127.0.0.1:0"})
	ln, _ := serve(t, api, h)
	port := ln.Addr().(*net.TCPAddr).Port
	script := fmt.Sprintf(`for i in $(seq 100); do exec 3<>/dev/tcp/127.0.0.1/%d; printf 'GET /v1/tasks HTTP/1.1\r\nHost: localhost\r\n\r\n' >&3; exec 3>&-; done`, port)
	needSetpriv(t)
	if out, err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/bin/bash", "-c", script).CombinedOutput(); err != nil {
		t.Fatalf("the client: %v\n%s", err, out)
	}
	// A request of root after them: the handler counts it, and any of theirs that got in.
	if code := status(t, &http.Client{Timeout: 10 * time.Second}, "http://"+ln.Addr().String()+"/v1/tasks", ""); code != 200 {
		t.Fatalf("root: HTTP %d", code)
	}
	if n := reached.Load(); n != 1 {
		t.Fatalf("%d requests of uid 65534 on closed sockets reached a path that needs credentials", n-1)
	}
}

// TestCallerOverIPv6Loopback: the owner of an IPv6 client socket is found as well (tcp6):
// root reads, uid 65534 does not.
func TestCallerOverIPv6Loopback(t *testing.T) {
	api, _ := introspect.Guard(introspect.Options{Listen: "[::1]:0"})
	ln, err := api.Listen()
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	srv := api.Server(ok)
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	url := "http://" + ln.Addr().String() + "/v1/tasks"
	if code := status(t, &http.Client{Timeout: 10 * time.Second}, url, ""); code != 200 {
		t.Errorf("root over [::1]: HTTP %d; want 200", code)
	}
	if code, body := asUser(t, 65534, 65534, "-g", url); code != 401 {
		t.Errorf("uid 65534 over [::1]: HTTP %d; want 401\n%s", code, body)
	}
}

// TestUsersConnectionsAreBounded: uid 65534 opening 40 connections and holding them gets 32:
// the other 8 are answered 503 at once, unasked, and closed, while one of the 32 is served;
// once the user's connections close, it connects again.
func TestUsersConnectionsAreBounded(t *testing.T) {
	t.Parallel()
	needSetpriv(t)
	api, _ := introspect.Guard(introspect.Options{Listen: "127.0.0.1:0"})
	ln, _ := serve(t, api, ok)
	addr := ln.Addr().(*net.TCPAddr)
	// Waits (at most 20 s) until 8 connections have said something unasked, then asks on one
	// that did not.
	script := fmt.Sprintf(`fds=(); for i in $(seq 40); do exec {fd}<>/dev/tcp/127.0.0.1/%d; fds+=($fd); done
declare -A said; end=$((SECONDS+20))
while [ ${#said[@]} -lt 8 ] && [ $SECONDS -lt $end ]; do
  for fd in "${fds[@]}"; do
    [ -n "${said[$fd]}" ] && continue
    if read -t 0.05 -r line <&$fd; then said[$fd]=1; echo "said: $line"; fi
  done
done
for fd in "${fds[@]}"; do [ -n "${said[$fd]}" ] && continue
  printf 'GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n' >&$fd; read -t 10 -r line <&$fd; echo "asked: $line"; break
done`, addr.Port)
	out, err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/bin/bash", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("the client: %v\n%s", err, out)
	}
	if n := strings.Count(string(out), "said: HTTP/1.1 503 Service Unavailable"); n != 8 || !strings.Contains(string(out), "asked: HTTP/1.1 200 OK") {
		t.Fatalf("uid 65534 holding 40 connections: %d answered 503 unasked (want 8), and one of the rest must be served:\n%s", n, out)
	}
	// The user's connections are closed now (bash ended): it connects again, within a bound.
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, _ := asUser(t, 65534, 65534, "http://"+addr.String()+"/healthz")
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("uid 65534 still refused 20 s after closing its connections: HTTP %d", code)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code := status(t, &http.Client{Timeout: 10 * time.Second}, "http://"+addr.String()+"/v1/tasks", ""); code != 200 {
		t.Fatalf("root: HTTP %d", code)
	}
}

// TestOpenPagesAreShared: however often and with whatever query strings users without
// credentials ask, each open page is computed once per period (an hour here) — the engine's
// loop, which the pages query, does not work for them — while root's requests are each served.
func TestOpenPagesAreShared(t *testing.T) {
	var mu sync.Mutex
	computed := map[string]int{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		computed[r.URL.RequestURI()]++
		mu.Unlock()
		w.Write([]byte("page"))
	})
	api, _ := introspect.Guard(introspect.Options{Listen: "127.0.0.1:0", Limits: introspect.Limits{OpenPagesEvery: time.Hour}})
	ln, _ := serve(t, api, h)
	base := "http://" + ln.Addr().String()
	var urls []string
	for i := range 5 {
		urls = append(urls, fmt.Sprintf("%s/metrics?n=%d", base, i), fmt.Sprintf("%s/?part=main&n=%d", base, i), base+"/", base+"/healthz")
	}
	if code, body := asUser(t, 65534, 65534, urls...); code != 200 {
		t.Fatalf("uid 65534: HTTP %d\n%s", code, body)
	}
	want := map[string]int{"/metrics": 1, "/?part=main": 1, "/": 1, "/healthz": 1}
	mu.Lock()
	for uri, n := range want {
		if computed[uri] != n {
			t.Errorf("%s computed %d times for 20 requests of uid 65534; want %d (all: %v)", uri, computed[uri], n, computed)
		}
	}
	mu.Unlock()
	c := &http.Client{Timeout: 10 * time.Second}
	for range 3 {
		status(t, c, base+"/metrics", "")
	}
	mu.Lock()
	defer mu.Unlock()
	if computed["/metrics"] != 4 {
		t.Errorf("/metrics computed %d times after 3 requests of root; want 4 (root is never served a shared answer)", computed["/metrics"])
	}
}
