package introspect_test

import (
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/introspect"
)

// TestAServiceWorkerScriptIsAnsweredWithItsRemoval (issue 41): whatever path a squatter's
// worker was registered from, a browser's request for its script (Service-Worker: script) is
// answered 200 with the worker that unregisters itself — without credentials, as a browser's
// update check carries none — and the status page says Clear-Site-Data: "storage". (The
// browser's side: TestAStatusPageSquattersWorkerGoesAtTheNextVisit in cmd/agentd.)
func TestAServiceWorkerScriptIsAnsweredWithItsRemoval(t *testing.T) {
	ln := liveAPI(t, introspect.Options{Listen: "127.0.0.1:0"})
	for _, path := range []string{"/sw.js", "/v1/tasks", "/status.js", "/"} {
		code, h, body := rawRequest(t, ln.Addr().String(), "GET "+path+" HTTP/1.1\r\nHost: 127.0.0.1\r\nService-Worker: script\r\nConnection: close\r\n\r\n")
		if code != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/javascript") || !strings.Contains(body, "self.registration.unregister()") || strings.Contains(body, "fetch") {
			t.Errorf("a worker's script from %s: HTTP %d %s %q; want the worker that removes itself, and nothing else", path, code, h.Get("Content-Type"), body)
		}
	}
	code, h, _ := rawRequest(t, ln.Addr().String(), "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
	if code != 200 || h.Get("Clear-Site-Data") != `"storage"` {
		t.Errorf("the status page: HTTP %d, Clear-Site-Data %q; want \"storage\"", code, h.Get("Clear-Site-Data"))
	}
}
