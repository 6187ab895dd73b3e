package introspect

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

// Bounds of the API: a client may be slow or hostile, the agent must not care.
const (
	maxInFlight   = 64 // requests served at once; more get 503
	maxLongPolls  = 8  // /v1/journal/records?wait=… waiting at once
	maxExports    = 2  // /v1/journal/export copies at once
	readTimeout   = 30 * time.Second
	writeTimeout  = 90 * time.Second // longer than the longest long poll (60 s)
	idleTimeout   = 60 * time.Second
	headerTimeout = 10 * time.Second
)

// API is where and how the introspection API may be reached: loopback TCP or a unix socket as
// they are; any other address only with a bearer token.
type API struct {
	network, addr string
	token         []byte // nil: no token required
}

// Guard checks --listen against the token file. An address that is not loopback (0.0.0.0, a
// host's own address, a name) needs a token file, or a unix socket instead; otherwise the
// agent refuses to start with an error naming both ways.
func Guard(listen, tokenFile string) (*API, error) {
	a := &API{network: "tcp", addr: listen}
	if path, ok := strings.CutPrefix(listen, "unix:"); ok {
		if path == "" {
			return nil, fmt.Errorf("--listen %q: want unix:/path/to/socket", listen)
		}
		a.network, a.addr = "unix", path
	}
	if tokenFile != "" {
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return nil, fmt.Errorf("--api-token-file: %w", err)
		}
		if a.token = []byte(strings.TrimSpace(string(b))); len(a.token) == 0 {
			return nil, fmt.Errorf("--api-token-file %s is empty", tokenFile)
		}
	}
	if a.network == "tcp" && a.token == nil && !loopback(listen) {
		return nil, fmt.Errorf("--listen %s is not a loopback address: anyone who reaches it could read every task and the journal. Give --api-token-file FILE (clients then send Authorization: Bearer <its content>), or listen on a unix socket (--listen unix:/run/agentd/api.sock), or on 127.0.0.1", listen)
	}
	return a, nil
}

// loopback reports whether a host:port names only the loopback interface.
func loopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Listen opens the listener. A unix socket is made 0600; a stale socket left by a dead agent is
// replaced, anything else at that path is refused.
func (a *API) Listen() (net.Listener, error) {
	if a.network == "unix" {
		if st, err := os.Lstat(a.addr); err == nil {
			if st.Mode()&os.ModeSocket == 0 {
				return nil, fmt.Errorf("--listen unix:%s: a file that is not a socket is in the way", a.addr)
			}
			_ = os.Remove(a.addr)
		}
	}
	ln, err := net.Listen(a.network, a.addr)
	if err != nil {
		return nil, fmt.Errorf("--listen %s: %w", a.addr, err)
	}
	if a.network == "unix" {
		if err := os.Chmod(a.addr, 0o600); err != nil {
			ln.Close()
			return nil, fmt.Errorf("--listen unix:%s: %w", a.addr, err)
		}
	}
	return ln, nil
}

// Server wraps h with the token check and the bounds, in a server with read, write and idle
// timeouts.
func (a *API) Server(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           a.Wrap(h),
		ReadHeaderTimeout: headerTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    64 << 10,
	}
}

// Wrap adds the token check (constant-time) and the bounds on requests, long polls and exports.
func (a *API) Wrap(h http.Handler) http.Handler {
	inFlight := make(chan struct{}, maxInFlight)
	longPolls := make(chan struct{}, maxLongPolls)
	exports := make(chan struct{}, maxExports)
	busy := func(w http.ResponseWriter, what string) {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "too many "+what+" at once; try again", http.StatusServiceUnavailable)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.token != nil {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(got), a.token) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="agentd"`)
				http.Error(w, "unauthorized: send Authorization: Bearer <the content of --api-token-file>", http.StatusUnauthorized)
				return
			}
		}
		select {
		case inFlight <- struct{}{}:
			defer func() { <-inFlight }()
		default:
			busy(w, "requests")
			return
		}
		var extra chan struct{}
		switch {
		case r.URL.Path == "/v1/journal/export":
			extra = exports
		case r.URL.Path == "/v1/journal/records" && r.URL.Query().Get("wait") != "" && r.URL.Query().Get("wait") != "0":
			extra = longPolls
		case strings.HasSuffix(r.URL.Path, "/logs") && (r.URL.Query().Get("follow") == "1" || r.URL.Query().Get("follow") == "true"):
			extra = longPolls // a followed container log (logs.go) holds its request as long as a long poll
		}
		if extra != nil {
			select {
			case extra <- struct{}{}:
				defer func() { <-extra }()
			default:
				busy(w, strings.TrimPrefix(r.URL.Path, "/v1/journal/")+" requests")
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// errSlowClient is an export cut off because the client stopped reading.
var errSlowClient = errors.New("client stopped reading")
