package main

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/agentd/agentd/internal/controlplane"
)

// squatterPage registers a service worker for the whole origin that answers every page itself.
const squatterPage = `<!doctype html><title>squatted</title><p id="squatted">served by a squatter</p>
<script>navigator.serviceWorker.register("/sw.js", {scope: "/"});</script>`

const squatterWorker = `self.addEventListener("install", () => self.skipWaiting());
self.addEventListener("activate", (e) => e.waitUntil(self.clients.claim()));
self.addEventListener("fetch", (e) => {
  if (e.request.mode === "navigate") e.respondWith(new Response(
    '<!doctype html><title>squatted</title><p id="squatted">served by the squatter\'s worker</p>',
    {headers: {"Content-Type": "text/html"}}));
});`

// TestAStatusPageSquattersWorkerGoesAtTheNextVisit (issue 41): a local user who held the API's
// port while the agent was down served root's browser a page whose service worker answers every
// page of that origin. Once the agent serves the port, the browser's next visit shows the
// agent's status page, not the squatter's — the worker is gone (internal/introspect
// serviceworker.go) — within a bounded wait.
func TestAStatusPageSquattersWorkerGoesAtTheNextVisit(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns the agent and Chromium")
	}
	browser := chromiumPath()
	if browser == "" {
		t.Skip("no chromium on PATH (Debian: apt-get install -y chromium; .ci/run installs it)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	squatter := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/sw.js" {
			w.Header().Set("Content-Type", "text/javascript")
			_, _ = w.Write([]byte(squatterWorker))
			return
		}
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte(squatterPage))
	})}
	go func() { _ = squatter.Serve(ln) }()

	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.Flag("disable-gpu", true))...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(cancel)
	within := func(d time.Duration) context.Context {
		c, cancel := context.WithTimeout(ctx, d)
		t.Cleanup(cancel)
		return c
	}
	if err := chromedp.Do(ctx, chromedp.Navigate("http://"+addr+"/")); err != nil {
		t.Fatalf("navigate to the squatter: %v", err)
	}
	if _, err := chromedp.Run(within(20*time.Second), chromedp.Poll[bool](`navigator.serviceWorker.controller !== null`)); err != nil {
		t.Fatalf("the squatter's worker never took the page: %v", err)
	}
	if err := squatter.Close(); err != nil {
		t.Fatal(err)
	}

	cp := httptest.NewServer(controlplane.New("", controlplane.Faults{}).Handler())
	t.Cleanup(cp.Close)
	agent := startProc(t, "run", "--runtime", "sim", "--data-dir", filepath.Join(t.TempDir(), "data"), "--backend", cp.URL,
		"--listen", addr, "--log-format", "json", "--agent-id", "agent-worker")
	agent.await(t, "agent running", 30*time.Second)

	if err := chromedp.Do(within(20*time.Second), chromedp.Navigate("http://"+addr+"/")); err != nil {
		t.Fatalf("navigate to the agent: %v", err)
	}
	// The page is navigated again under the poll (the worker's removal reloads it): a poll the
	// navigation ends is polled again, within the one bound.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := chromedp.Run(within(5*time.Second), chromedp.Poll[bool](`document.querySelector("#count-RUNNING") !== null && document.querySelector("#squatted") === null`))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			html, _ := chromedp.Run(within(5*time.Second), chromedp.Evaluate[string](`document.documentElement.outerHTML`))
			t.Fatalf("30 s after the agent took its port back, the browser still shows %q: %v", html, err)
		}
	}
	if n, err := chromedp.Run(within(10*time.Second), chromedp.Evaluate[int](`navigator.serviceWorker.getRegistrations().then((rs) => rs.length)`, chromedp.EvalAwaitPromise)); err != nil || n != 0 {
		t.Fatalf("service workers still registered for the origin: %d (%v)", n, err)
	}
}
