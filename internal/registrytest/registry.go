// Package registrytest is an image registry for tests: go-containerregistry's in-memory OCI
// registry on 127.0.0.1 (which the Docker Engine pulls from over plain HTTP), behind the
// faults a real registry shows — it asks for credentials, answers 503, stalls in the middle of
// a blob, or sends it slowly but steadily — and it counts what it was asked, so a test can
// prove a pull was or was not retried. Push builds runnable images from the testbox binary
// (testdata/testbox) without a Docker daemon.
package registrytest

import (
	"encoding/base64"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
)

// pushHeader marks the test's own pushes: they pass every fault and are not counted.
const pushHeader = "X-Registrytest-Push"

// Registry is a running test registry. Its faults can be changed between pulls.
type Registry struct {
	// Addr is host:port, for references: Addr + "/app:1".
	Addr string
	srv  *httptest.Server

	mu         sync.Mutex
	user, pass string
	fail503    int // the next this many manifest requests answer 503
	stallAfter int // blob bodies stop after this many bytes (negative: never)
	rate       int // blob bodies at this many bytes per second (0: at once)
	requests   []string
	closed     chan struct{}
	closeOnce  sync.Once
}

// New starts a registry that needs no credentials and has no faults; it closes when the test
// ends.
func New(t testing.TB) *Registry {
	t.Helper()
	r := &Registry{stallAfter: -1, closed: make(chan struct{})}
	inner := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	r.srv = httptest.NewServer(r.middleware(inner))
	r.Addr = strings.TrimPrefix(r.srv.URL, "http://")
	t.Cleanup(r.Close)
	return r
}

// Close stops the registry (a registry that has gone away); pulls stalled in it end.
func (r *Registry) Close() {
	r.closeOnce.Do(func() {
		close(r.closed)
		r.srv.CloseClientConnections()
		r.srv.Close()
	})
}

// RequireAuth makes every request need these credentials (HTTP basic, as Docker sends them).
func (r *Registry) RequireAuth(user, pass string) {
	r.mu.Lock()
	r.user, r.pass = user, pass
	r.mu.Unlock()
}

// Fail503 makes the next n manifest requests answer 503 Service Unavailable.
func (r *Registry) Fail503(n int) {
	r.mu.Lock()
	r.fail503 = n
	r.mu.Unlock()
}

// StallAfter makes every blob body stop after n bytes and send nothing more until the client
// gives up (negative: never stall).
func (r *Registry) StallAfter(n int) {
	r.mu.Lock()
	r.stallAfter = n
	r.mu.Unlock()
}

// Throttle sends blob bodies at bytesPerSec, in tenths of a second (0: at once).
func (r *Registry) Throttle(bytesPerSec int) {
	r.mu.Lock()
	r.rate = bytesPerSec
	r.mu.Unlock()
}

// Requests is every request the registry was asked ("GET /v2/app/manifests/1 401"), the
// test's pushes not included.
func (r *Registry) Requests() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.requests...)
}

// Count is how many requests' lines contain every one of words.
func (r *Registry) Count(words ...string) int {
	n := 0
	for _, l := range r.Requests() {
		all := true
		for _, w := range words {
			all = all && strings.Contains(l, w)
		}
		if all {
			n++
		}
	}
	return n
}

// statusWriter remembers the status for the request log.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (r *Registry) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Header.Get(pushHeader) != "" {
			next.ServeHTTP(w, req)
			return
		}
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			r.mu.Lock()
			r.requests = append(r.requests, fmt.Sprintf("%s %s %d", req.Method, req.URL.Path, sw.status))
			r.mu.Unlock()
		}()
		r.mu.Lock()
		user, pass, stall, rate := r.user, r.pass, r.stallAfter, r.rate
		fail := false
		if strings.Contains(req.URL.Path, "/manifests/") && r.fail503 > 0 {
			r.fail503--
			fail = true
		}
		r.mu.Unlock()
		if user != "" {
			u, p, ok := req.BasicAuth()
			if !ok || u != user || p != pass {
				sw.Header().Set("WWW-Authenticate", `Basic realm="registrytest"`)
				sw.Header().Set("Content-Type", "application/json")
				sw.WriteHeader(http.StatusUnauthorized)
				io.WriteString(sw, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`)
				return
			}
		}
		if fail {
			sw.Header().Set("Content-Type", "application/json")
			sw.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(sw, `{"errors":[{"code":"UNAVAILABLE","message":"try again later"}]}`)
			return
		}
		if req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/blobs/sha256:") && (stall >= 0 || rate > 0) {
			next.ServeHTTP(&slowWriter{statusWriter: sw, stallAfter: stall, rate: rate, done: req.Context().Done(), closed: r.closed}, req)
			return
		}
		next.ServeHTTP(sw, req)
	})
}

// slowWriter sends a body slowly, or stops sending it.
type slowWriter struct {
	*statusWriter
	stallAfter int
	rate       int
	sent       int
	done       <-chan struct{}
	closed     <-chan struct{}
}

func (w *slowWriter) Write(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		chunk := len(b)
		if w.rate > 0 {
			chunk = min(chunk, max(w.rate/10, 1))
		}
		if w.stallAfter >= 0 {
			if w.sent >= w.stallAfter {
				w.Flush()
				select { // nothing more, ever: the client must give up
				case <-w.done:
				case <-w.closed:
				}
				return n, io.ErrClosedPipe
			}
			chunk = min(chunk, w.stallAfter-w.sent)
		}
		m, err := w.statusWriter.Write(b[:chunk])
		n, w.sent, b = n+m, w.sent+m, b[m:]
		if err != nil {
			return n, err
		}
		if w.rate > 0 {
			w.Flush()
			select {
			case <-time.After(100 * time.Millisecond):
			case <-w.done:
				return n, io.ErrClosedPipe
			case <-w.closed:
				return n, io.ErrClosedPipe
			}
		}
	}
	return n, nil
}

// AuthFile is the text of a Docker config.json holding user:pass for this registry.
func (r *Registry) AuthFile(user, pass string) string {
	return fmt.Sprintf(`{"auths": {%q: {"auth": %q}}}`, r.Addr, base64.StdEncoding.EncodeToString([]byte(user+":"+pass)))
}
