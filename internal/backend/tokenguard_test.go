package backend_test

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/backend"
	"github.com/agentd/agentd/internal/protocol"
)

// TestRedirectsNeverCarryTheToken: whatever a backend answers with a 3xx — the same host on
// another port, https to plain http, another host name — the agent does not follow it, so the
// token never reaches the target, and the request is an error (PROTOCOL.md 1.1).
func TestRedirectsNeverCarryTheToken(t *testing.T) {
	var hits, tokens atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.Header.Get("Authorization") != "" {
			tokens.Add(1)
		}
		w.Write([]byte(`{"payloads":[]}`))
	}))
	defer target.Close()
	port := target.URL[strings.LastIndex(target.URL, ":")+1:]
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	os.WriteFile(tok, []byte("s3cret-token\n"), 0o600)
	redirectTo := func(to string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, to+r.URL.RequestURI(), http.StatusTemporaryRedirect)
		})
	}
	cases := []struct {
		name string
		tls  bool
		to   string
	}{
		{"same host, other port", false, "http://127.0.0.1:" + port},
		{"https to http", true, "http://127.0.0.1:" + port},
		{"another host", false, "http://localhost:" + port},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var src *httptest.Server
			cfg := backend.Config{AgentID: "agent-1", TokenFile: tok, Timeout: 2 * time.Second}
			if tc.tls {
				src = httptest.NewTLSServer(redirectTo(tc.to))
				cfg.CAFile = serverCA(t, src)
			} else {
				src = httptest.NewServer(redirectTo(tc.to))
			}
			defer src.Close()
			cfg.URL = src.URL
			c, err := backend.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			if _, err := c.Poll(ctx, 0); err == nil || !strings.Contains(err.Error(), "redirect refused") {
				t.Errorf("poll: %v; want the redirect refused", err)
			}
			if err := c.Ack(ctx, []string{"m"}); err == nil {
				t.Error("ack through a redirect succeeded")
			}
			if r := c.Report(ctx, []protocol.StateChange{change("c-1", "task/x", "RUNNING")}); r.Outcome == protocol.Settled {
				t.Errorf("report through a redirect settled: %+v", r)
			}
			if n := tokens.Load(); n != 0 {
				t.Fatalf("the redirect target received the token %d times", n)
			}
			if n := hits.Load(); n != 0 {
				t.Fatalf("the redirect target was reached %d times; no redirect may be followed", n)
			}
		})
	}
}

func TestPlainHTTPTokenNeedsTheFlag(t *testing.T) {
	tok := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tok, []byte("t\n"), 0o600)
	for _, tc := range []struct {
		url   string
		allow bool
		ok    bool
	}{
		{"http://192.0.2.10:8080", false, false}, // TEST-NET: never contacted, New only checks
		{"http://controlplane.example:8080", false, false},
		{"http://192.0.2.10:8080", true, true},
		{"http://127.0.0.1:8080", false, true},
		{"http://localhost:8080", false, true},
		{"http://[::1]:8080", false, true},
		{"https://controlplane.example", false, true},
	} {
		c, err := backend.New(backend.Config{URL: tc.url, AgentID: "a", TokenFile: tok, AllowPlainToken: tc.allow})
		if (err == nil) != tc.ok {
			t.Errorf("%s allow=%v: err = %v, want ok=%v", tc.url, tc.allow, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "--allow-plain-token") {
			t.Errorf("%s: error %q does not name --allow-plain-token", tc.url, err)
		}
		if c != nil {
			c.Close()
		}
	}
	// Without a token there is nothing to leak.
	if _, err := backend.New(backend.Config{URL: "http://192.0.2.10", AgentID: "a"}); err != nil {
		t.Errorf("no token: %v", err)
	}
}

// TestOldTLSRefused: a backend that offers only TLS 1.1 is refused, with or without --ca-file,
// before any token is sent.
func TestOldTLSRefused(t *testing.T) {
	var tokens atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			tokens.Add(1)
		}
		w.Write([]byte(`{"payloads":[]}`))
	}))
	srv.TLS = &tls.Config{MaxVersion: tls.VersionTLS11}
	srv.StartTLS()
	defer srv.Close()
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	os.WriteFile(tok, []byte("t\n"), 0o600)
	ca := serverCA(t, srv)
	for _, caFile := range []string{ca, ""} {
		c, err := backend.New(backend.Config{URL: srv.URL, AgentID: "a", TokenFile: tok, CAFile: caFile, Timeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Poll(context.Background(), 0); err == nil {
			t.Errorf("ca-file %q: a TLS 1.1 backend answered", caFile)
		}
		c.Close()
	}
	if tokens.Load() != 0 {
		t.Fatal("the token reached a TLS 1.1 backend")
	}
}

// TestCredentialsInTheBackendURLAreRefused: userinfo in --backend is refused naming the flag
// and --token-file, and no error shows the password, even when the URL does not parse.
func TestCredentialsInTheBackendURLAreRefused(t *testing.T) {
	const secret = "s3cret-Pw"
	for _, raw := range []string{
		"http://user:" + secret + "@127.0.0.1:8080",
		"https://" + secret + "@cp.example/v1",
		"http://user:" + secret + "@cp.example:notaport/",
		"https://user:" + secret + "@",
		"http:/user:" + secret + "@cp.example",
		"http:user:" + secret + "@cp.example",
		`http:\\user:` + secret + "@cp.example",
		"http:///user:" + secret + "@cp.example",
	} {
		_, err := backend.New(backend.Config{URL: raw, AgentID: "a"})
		if err == nil || !strings.Contains(err.Error(), "--backend") {
			t.Errorf("%s: %v; want a refusal naming --backend", raw, err)
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("%s: the error shows the password: %v", raw, err)
		}
	}
	if _, err := backend.ParseURL("http://user:" + secret + "@127.0.0.1:8080"); err == nil || !strings.Contains(err.Error(), "--token-file") {
		t.Errorf("userinfo: %v; want it to say the token belongs in --token-file", err)
	}
}

func TestRedactURL(t *testing.T) {
	for raw, want := range map[string]string{
		"http://u:p@h:1/x?y@z":     "http://REDACTED@h:1/x?y@z",
		"https://tok@h":            "https://REDACTED@h",
		"http://a@b@h/":            "http://REDACTED@h/",
		"http://h:1/path@x":        "http://h:1/path@x",
		"http://127.0.0.1:51678":   "http://127.0.0.1:51678",
		"/var/lib/agentd":          "/var/lib/agentd",
		"unix:///run/docker.sock":  "unix:///run/docker.sock",
		"tcp://u:p@10.0.0.1:2376":  "tcp://REDACTED@10.0.0.1:2376",
		"http://u:p@h:notaport/#@": "http://REDACTED@h:notaport/#@",
		// Spellings a browser (WHATWG URL) reads as userinfo@host though Go's url.Parse does
		// not: refused as not http(s)://, their error and --print-config must not show them.
		"http:/u:p@h/x":  "http:/REDACTED@h/x",
		"http:u:p@h":     "http:REDACTED@h",
		`http:\\u:p@h\x`: `http:\\REDACTED@h\x`,
		"HTTPS:///u:p@h": "HTTPS:///REDACTED@h",
		"localhost:8080": "localhost:8080",
	} {
		if got := backend.RedactURL(raw); got != want {
			t.Errorf("RedactURL(%q) = %q; want %q", raw, got, want)
		}
	}
}

// TestTokenFileGetsTheSealKeysChecks: the bearer token lets its holder poll this agent's
// payloads — every task's env values, which the control plane sends in the clear — so its file
// is read as the seal key is (datadir.ReadPrivate). Before, a 0644 token file gave every local
// user the payloads, a FIFO in its place hung the start, and a link was followed.
func TestTokenFileGetsTheSealKeysChecks(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "token")
	os.WriteFile(good, []byte("t\n"), 0o600)
	open := filepath.Join(dir, "open")
	os.WriteFile(open, []byte("t\n"), 0o644)
	link := filepath.Join(dir, "link")
	os.Symlink(good, link)
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{open: "mode 0644", link: "symbolic link", fifo: "named pipe"} {
		done := make(chan error, 1)
		go func() {
			_, err := backend.New(backend.Config{URL: "http://127.0.0.1:9", AgentID: "a", TokenFile: path})
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "--token-file") || !strings.Contains(err.Error(), want) {
				t.Errorf("--token-file %s: %v; want refused naming the flag and %q", path, err, want)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("--token-file %s: the start hangs", path)
		}
	}
	c, err := backend.New(backend.Config{URL: "http://127.0.0.1:9", AgentID: "a", TokenFile: good})
	if err != nil {
		t.Fatalf("a 0600 token file of the agent's: %v", err)
	}
	c.Close()
}
