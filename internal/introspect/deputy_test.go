package introspect_test

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/introspect"
)

// rootRequest sends one request as this test's user (root) over loopback, with the headers
// given and nothing else a client of the agent's own would add, and returns the answer's
// status, headers and body.
func rootRequest(t *testing.T, addr, method, path string, headers ...string) (int, http.Header, string) {
	t.Helper()
	var req strings.Builder
	fmt.Fprintf(&req, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n", method, path)
	for _, h := range headers {
		fmt.Fprintf(&req, "%s\r\n", h)
	}
	req.WriteString("\r\n")
	return rawRequest(t, addr, req.String())
}

// TestRootWithoutClientHeaderIsALocalUser: root's loopback connection lends its trust to
// whatever URL a root service is made to fetch (the Docker Engine GETs the token realm any
// registry names, as root, and hands the answer back in the pull error). So root reads tasks,
// logs, records and the journal only when it also sends Agentd-Client — which no URL-follower
// sends; without it root gets what any local user gets: the open pages, counts only.
func TestRootWithoutClientHeaderIsALocalUser(t *testing.T) {
	t.Parallel()
	ln := liveAPI(t, introspect.Options{Listen: "127.0.0.1:0"})
	addr := ln.Addr().String()
	logs := "/v1/tasks/" + secretTask + "/containers/app/logs"
	for _, path := range []string{"/v1/journal/export", "/v1/tasks", "/v1/tasks/" + secretTask, logs, logs + "?follow=1",
		"/v1/journal/records?from=1", "/v1/journal/records?from=1&wait=1", "/status/timeline.svg?task=" + url.QueryEscape(secretTask), "/signin"} {
		for _, as := range []struct {
			what    string
			headers []string
		}{
			{"no header (dockerd's token fetch, a redirect, an <img>)", nil},
			{"an empty Agentd-Client", []string{"Agentd-Client:"}},
			{"a User-Agent of dockerd", []string{"User-Agent: docker/27.0 go/go1.22 (linux) UpstreamClient(Docker-Client/27.0)"}},
		} {
			code, _, body := rootRequest(t, addr, "GET", path, as.headers...)
			if code != 401 {
				t.Errorf("root, %s: GET %s: HTTP %d; want 401\n%.300s", as.what, path, code, body)
			}
			if strings.Contains(body, secretTask) || strings.Contains(body, "exited 3") {
				t.Errorf("root, %s: GET %s carries the task: %.300s", as.what, path, body)
			}
			if code == 401 && !strings.Contains(body, "Agentd-Client") {
				t.Errorf("root, %s: GET %s: the 401 does not name the header root needs: %s", as.what, path, body)
			}
		}
		want := 200
		if path == "/signin" {
			want = 303 // signed in already: back to the page
		}
		if code, _, body := rootRequest(t, addr, "GET", path, "Agentd-Client: 1"); code != want {
			t.Errorf("root with Agentd-Client: GET %s: HTTP %d; want %d\n%.300s", path, code, want, body)
		}
	}
	if _, _, body := rootRequest(t, addr, "GET", logs, "Agentd-Client: 1"); !strings.Contains(body, "exited 3") {
		t.Errorf("root with Agentd-Client: the logs lack the container's output: %q", body)
	}
	if _, _, body := rootRequest(t, addr, "GET", "/v1/journal/export", "Agentd-Client: 1"); !strings.Contains(body, secretTask) {
		t.Errorf("root with Agentd-Client: the export lacks the task: %.300s", body)
	}
	// The open pages still answer root without the header, as they do any local user: counts only.
	code, _, page := rootRequest(t, addr, "GET", "/")
	if code != 200 || strings.Contains(page, secretTask) || !strings.Contains(page, `id="tasks-limited"`) {
		t.Errorf("root without the header: the status page (HTTP %d) shows more than counts, or does not say tasks need credentials", code)
	}
}

// TestPreflightIsNeverGranted: a page on another origin can send Agentd-Client only after a
// CORS preflight succeeds. No answer of the API — to a preflight or to anything else — carries
// an Access-Control-Allow-* header, and a preflight is never answered 2xx, so the browser never
// sends the page's request.
func TestPreflightIsNeverGranted(t *testing.T) {
	t.Parallel()
	tok := filepath.Join(t.TempDir(), "api-token")
	if err := os.WriteFile(tok, []byte("the-api-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ln := liveAPI(t, introspect.Options{Listen: "127.0.0.1:0", TokenFile: tok})
	addr := ln.Addr().String()
	preflight := []string{"Origin: http://attacker.example", "Access-Control-Request-Method: GET", "Access-Control-Request-Headers: agentd-client"}
	for _, c := range []struct {
		method, path string
		headers      []string
	}{
		{"OPTIONS", "/v1/tasks", preflight},
		{"OPTIONS", "/v1/journal/export", preflight},
		{"OPTIONS", "/", preflight},
		{"OPTIONS", "/metrics", preflight},
		{"OPTIONS", "*", preflight},
		// Not what a browser sends, but no credential may turn a preflight into a grant either.
		{"OPTIONS", "/v1/tasks", append([]string{"Agentd-Client: 1"}, preflight...)},
		{"OPTIONS", "/v1/tasks", append([]string{"Authorization: Bearer the-api-token"}, preflight...)},
		// The answers themselves never allow another origin to read them.
		{"GET", "/v1/tasks", []string{"Origin: http://attacker.example", "Agentd-Client: 1"}},
		{"GET", "/", []string{"Origin: http://attacker.example"}},
		{"GET", "/v1/tasks", []string{"Origin: null", "Authorization: Bearer the-api-token"}},
	} {
		code, h, body := rootRequest(t, addr, c.method, c.path, c.headers...)
		for name := range h {
			if strings.HasPrefix(strings.ToLower(name), "access-control-") {
				t.Errorf("%s %s %v: HTTP %d carries %s: %s", c.method, c.path, c.headers, code, name, h.Get(name))
			}
		}
		if c.method == "OPTIONS" && code >= 200 && code < 300 {
			t.Errorf("%s %s %v: HTTP %d; a preflight must never succeed\n%.300s", c.method, c.path, c.headers, code, body)
		}
	}
}
