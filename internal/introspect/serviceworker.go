package introspect

import "net/http"

// A service worker a squatter left behind (issue 41). While the agent was down, a local user
// could serve the API's address (127.0.0.1:51678) and give a root browser that opened it a
// page registering a service worker for that origin; from then on the browser asks that worker,
// not the network, for every page of the origin — the real agent's status page included — and
// the worker could show its own page asking for the token, or read the agent's answers to the
// browser (same origin). What the agent does against it:
//
//   - Any request a browser makes for a worker's script (it says so: Service-Worker: script) is
//     answered, on every path and before any credential is asked for, with a worker that
//     removes its registration and reloads the pages it controlled. A browser checks the
//     script of a registered worker against the network when it next navigates to the origin
//     (the script's HTTP cache bypassed), finds it changed, installs this one, which
//     unregisters at once: the next page comes from the agent. Never an error: an update that
//     fails keeps the old worker. Not with Clear-Site-Data either: Chromium then keeps the
//     squatter's worker (seen with Chromium 156 headless).
//   - The status page says Clear-Site-Data: "storage", which also removes the origin's workers
//     (and storage the page never uses) wherever the browser gets the agent's page itself.
//
// The invariant: no worker of the API's origin outlives a browser's next visit to the agent,
// and the agent never serves a worker that does anything else.

// workerRemoval is the only service worker script the API serves.
const workerRemoval = `// agentd: removes the service worker registered for this origin (not the agent's).
self.addEventListener("install", () => self.skipWaiting());
self.addEventListener("activate", (event) => event.waitUntil(self.registration.unregister()
  .then(() => self.clients.matchAll({ type: "window" }))
  .then((pages) => Promise.all(pages.map((page) => page.navigate(page.url))))));
`

// servedWorkerRemoval answers a browser's request for a service worker script with
// workerRemoval, and reports whether it did.
func servedWorkerRemoval(w http.ResponseWriter, r *http.Request) bool {
	if r.Header.Get("Service-Worker") != "script" {
		return false
	}
	h := w.Header()
	h.Set("Content-Type", "text/javascript; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte(workerRemoval))
	return true
}
