package introspect

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/forensics"
)

// Who may read what (README "Security"):
//
//   - The API answers only its own names. On a TCP listener the Host header must be an IP
//     literal, localhost, or a name given with --api-host (any port); anything else is 421. A
//     page on attacker.example that re-resolves its name to 127.0.0.1 (DNS rebinding) sends
//     Host: attacker.example and reads nothing. A unix socket takes any Host: no browser
//     reaches it.
//   - Credentials are the API token (Authorization: Bearer, or the password of Basic, which a
//     browser prompts for), the unix socket (its mode, 0600 or 0660 with --api-group, decides
//     who connects), or, on a loopback TCP listener, a connection whose socket is owned by root
//     or by the agent's own user (read from the kernel's socket table, as SO_PEERCRED would
//     for a unix socket) AND that sends the header Agentd-Client (forensics.ClientHeader): local
//     root tools keep working with no token to hand around. The header is what keeps root's
//     trust from being lent: root services fetch URLs others name — the Docker Engine GETs
//     whatever token realm a registry's 401 names, and its pull error carries the answer back
//     to the control plane — and no such fetch, no redirect, no page's <img>, <script> or form,
//     and no cross-origin fetch (it would need a CORS preflight, which no answer here grants)
//     carries a header of the agent's choosing. Without it, root's connection is any local
//     user's.
//   - Without credentials, a loopback listener serves only the open pages: /healthz,
//     /metrics, /v1/metadata, and the status page with counts only — no task, reason, log,
//     record or timeline. Every other path answers 401. A listener that is not loopback
//     answers 401 to everything without the token.
//   - A wrong token is 401 even where no token is needed: a client that meant to authenticate
//     learns its token is wrong instead of seeing less.

// openPaths are what a caller without credentials may read on a loopback listener: they carry
// no secret and no output of any task. Exact paths: ServeMux would redirect any other
// spelling (//v1/tasks, /./v1/tasks), and those answer 401 here first.
var openPaths = map[string]bool{"/": true, "/status.css": true, "/status.js": true, "/healthz": true, "/metrics": true, "/v1/metadata": true}

// limitedKey marks a request served without credentials: the status page shows counts only.
type limitedKey struct{}

// limited reports whether r was let through without credentials. A handler used without Wrap
// (in-process tests) is the full view: the agent serves its API only through API.Server.
func limited(ctx context.Context) bool { return ctx.Value(limitedKey{}) != nil }

// hiddenDetail stands for a health problem on an open page: which sources have a problem is
// open, what it is is not — the core's slots name tasks and payloads, a runtime's error may
// name a container.
const hiddenDetail = "a problem (its detail needs credentials)"

// openHealth is the health slots as a caller without credentials reads them.
func openHealth(slots []engine.HealthSlot) []engine.HealthSlot {
	out := make([]engine.HealthSlot, len(slots))
	for i, s := range slots {
		if s.Problem != "" {
			s.Problem = hiddenDetail
		}
		out[i] = s
	}
	return out
}

// hostAllowed reports whether a Host header names this API: an IP literal, localhost, or an
// --api-host name, any port. An IP literal cannot be re-resolved, so it cannot be rebound.
func (a *API) hostAllowed(host string) bool {
	name := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
	}
	name = strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(name, "["), "]"))
	if name == "" {
		return false
	}
	if name == "localhost" || net.ParseIP(name) != nil {
		return true
	}
	for _, h := range a.hosts {
		if name == h {
			return true
		}
	}
	return false
}

// credentials reports whether r carries the token: a Bearer token or Basic's password (the
// user name is ignored). present reports whether it tried at all.
func (a *API) credentials(r *http.Request) (present, ok bool) {
	got, bearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !bearer {
		var basic bool
		if _, got, basic = r.BasicAuth(); !basic {
			return r.Header.Get("Authorization") != "", false
		}
	}
	return true, a.token != nil && subtle.ConstantTimeCompare([]byte(got), a.token) == 1
}

// trustedPeer reports whether r came over a loopback connection whose socket is owned by root
// or by the agent's user (owners.go) from one of the agent's own clients (the header above,
// any non-empty value). Unknown owners are not trusted.
func trustedPeer(r *http.Request) bool {
	if r.Header.Get(forensics.ClientHeader) == "" {
		return false
	}
	c, _ := r.Context().Value(connKey{}).(*ownedConn)
	return c != nil && c.trusted()
}

// Wrap adds the access rules (above) and the bounds (bounds.go) to h.
func (a *API) Wrap(h http.Handler) http.Handler {
	b := newBounds(a.limits)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// No answer of the API is ever to be guessed into HTML by a browser.
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if a.network == "tcp" && !a.hostAllowed(r.Host) {
			writeJSON(w, http.StatusMisdirectedRequest, map[string]string{"error": fmt.Sprintf("Host %q is not a name of this agent's API: ask for localhost, an IP address, or a name given with --api-host", r.Host)})
			return
		}
		if servedWorkerRemoval(w, r) { // serviceworker.go: a squatter's worker goes, whoever asks
			return
		}
		present, ok := a.credentials(r)
		full := ok || a.network == "unix" || (a.loopback && trustedPeer(r))
		switch {
		case present && !ok && a.token != nil:
			a.unauthorized(w, "the token sent is not the agent's")
			return
		case full:
		case a.loopback && openPaths[r.URL.Path]:
			r = r.WithContext(context.WithValue(r.Context(), limitedKey{}, true))
		default:
			a.unauthorized(w, "this path needs credentials: the API token (Authorization: Bearer <the content of --api-token-file>), the unix socket, or a loopback connection from root or the agent's user sending the header "+forensics.ClientHeader+": 1")
			return
		}
		b.serve(h, w, r, full)
	})
}

// unauthorized answers 401; with a token configured, a browser is offered Basic, whose
// password is the token (the page then shows tasks too).
func (a *API) unauthorized(w http.ResponseWriter, why string) {
	challenge := `Bearer realm="agentd"`
	if a.token != nil {
		challenge += `, Basic realm="agentd", charset="UTF-8"`
	}
	w.Header().Set("WWW-Authenticate", challenge)
	writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "unauthorized: " + why})
}
