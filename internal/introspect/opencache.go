package introspect

import (
	"bytes"
	"net/http"
	"sync"
	"time"
)

// Callers without credentials share their answers: each open page is computed at most once
// per Limits.OpenPagesEvery (1 s) and one at a time, whatever their number or rate, so no local
// user can make the engine's loop (which /, /healthz and /metrics query, over every task)
// spend its time on them. Their query strings are reduced to what the pages read (part=main),
// so a varied URL is no way around the sharing.

// openCache holds the last answer of each open page.
type openCache struct {
	every   time.Duration
	mu      sync.Mutex // held while an answer is computed: one at a time
	answers map[string]*sharedAnswer
}

type sharedAnswer struct {
	at     time.Time
	code   int
	header http.Header
	body   bytes.Buffer
}

func (a *sharedAnswer) Header() http.Header { return a.header }
func (a *sharedAnswer) Write(p []byte) (int, error) {
	if a.code == 0 {
		a.code = http.StatusOK
	}
	return a.body.Write(p)
}
func (a *sharedAnswer) WriteHeader(code int) {
	if a.code == 0 {
		a.code = code
	}
}

func newOpenCache(every time.Duration) *openCache {
	return &openCache{every: every, answers: map[string]*sharedAnswer{}}
}

// serve answers r from the shared answer of its page, computing it with h when it is older
// than c.every.
func (c *openCache) serve(h http.Handler, w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "the API answers GET only"})
		return
	}
	part := r.URL.Query().Get("part")
	r.URL.RawQuery = ""
	if r.URL.Path == "/" && part == "main" {
		r.URL.RawQuery = "part=main"
	}
	key := r.Method + " " + r.URL.RequestURI()
	c.mu.Lock()
	a := c.answers[key]
	if a == nil || time.Since(a.at) >= c.every {
		a = &sharedAnswer{header: http.Header{}}
		h.ServeHTTP(a, r)
		a.at = time.Now()
		c.answers[key] = a
	}
	c.mu.Unlock()
	for k, v := range a.header {
		w.Header()[k] = v
	}
	w.WriteHeader(max(a.code, http.StatusOK))
	if r.Method != http.MethodHead {
		_, _ = w.Write(a.body.Bytes())
	}
}
